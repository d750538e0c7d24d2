/**
 * JupyterLab mime renderer for nki_workbench Inspections.
 *
 * Renders `application/vnd.nki-workbench.inspection+json` (schema: docs/mime.md): a header with the
 * kernel name, then the Inspector's tabs exactly as the Python Inspector model lists them in
 * `inspector.tabs` (the widget's and the report's tabs: Summary | Config | IR | SBUF | PSUM |
 * Timeline | HLO, the failed-check marker on the Summary tab, the banner and colours inside the
 * tab HTML).  The renderer only lays them out: each tab's HTML goes through JupyterLab's
 * sanitizer, its picture is drawn from the validated base64 PNG in `images`.  Older outputs
 * without `inspector` get the previous layout (Summary | IR | Config | images, all as text).
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

/** The mime type this extension renders. */
export const MIME_TYPE = 'application/vnd.nki-workbench.inspection+json';

/** Known image names, in display order (others follow, sorted). */
const IMAGE_ORDER = ['sbuf', 'psum', 'timeline'];
const IMAGE_TITLES: { [name: string]: string } = {
  sbuf: 'SBUF',
  psum: 'PSUM',
  timeline: 'Timeline'
};
const BASE64 = /^[A-Za-z0-9+/\s]*={0,2}\s*$/;
const CLASS = 'jp-NkiInspection';

type JSONValue =
  | string
  | number
  | boolean
  | null
  | JSONValue[]
  | { [key: string]: JSONValue };

function el(tag: string, cls?: string, text?: string): HTMLElement {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** IR tokens worth colouring (the printer's syntax, see nki_workbench/_src/ir/printer.py). */
const IR_TOKEN = new RegExp(
  [
    '(#.*$)', // comment: the kernel's file:line
    "('[^']*')", // string literal attribute
    '\\b(kernel|param|alloc|for|in|return)\\b', // statement keywords
    '\\b(hbm|shared_hbm|private_hbm|sbuf|psum)\\b', // memories
    '([A-Za-z_]\\w*)(?=\\()', // opcode / loop kind: a name applied to arguments
    '(\\b\\d+(?:\\.\\d+)?(?:e[+-]?\\d+)?\\b)' // number
  ].join('|'),
  'g'
);
const IR_CLASSES = ['comment', 'string', 'keyword', 'memory', 'op', 'number'];

function irLine(text: string): HTMLElement {
  const code = el('span', `${CLASS}-irText`);
  let last = 0;
  IR_TOKEN.lastIndex = 0;
  for (let m = IR_TOKEN.exec(text); m !== null; m = IR_TOKEN.exec(text)) {
    if (m[0].length === 0) {
      IR_TOKEN.lastIndex += 1;
      continue;
    }
    if (m.index > last) {
      code.appendChild(document.createTextNode(text.slice(last, m.index)));
    }
    const kind = IR_CLASSES[[1, 2, 3, 4, 5, 6].findIndex(i => m![i] !== undefined)];
    code.appendChild(el('span', `${CLASS}-ir-${kind}`, m[0]));
    last = m.index + m[0].length;
  }
  if (last < text.length) {
    code.appendChild(document.createTextNode(text.slice(last)));
  }
  return code;
}

/** The IR as a table of numbered lines (numbers are not selectable, so copying copies IR only). */
function renderIr(ir: string): HTMLElement {
  const table = el('table', `${CLASS}-ir`);
  const body = el('tbody');
  const lines = ir.replace(/\n$/, '').split('\n');
  lines.forEach((line, i) => {
    const row = el('tr');
    row.appendChild(el('td', `${CLASS}-lineno`, String(i + 1)));
    const cell = el('td');
    cell.appendChild(irLine(line));
    row.appendChild(cell);
    body.appendChild(row);
  });
  table.appendChild(body);
  return table;
}

function scalarText(value: JSONValue): string {
  return typeof value === 'string' ? JSON.stringify(value) : String(value);
}

/** A JSON value as a collapsible tree; long strings (the IR inside the config) stay folded. */
function renderTree(value: JSONValue, key: string | null, depth: number): HTMLElement {
  if (value !== null && typeof value === 'object') {
    const entries: [string, JSONValue][] = Array.isArray(value)
      ? value.map((v, i) => [String(i), v])
      : Object.keys(value)
          .sort()
          .map(k => [k, (value as { [k: string]: JSONValue })[k]]);
    const details = el('details', `${CLASS}-tree`) as HTMLDetailsElement;
    details.open = depth < 1;
    const size = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
    details.appendChild(el('summary', undefined, key === null ? size : `${key} ${size}`));
    for (const [k, v] of entries) {
      details.appendChild(renderTree(v, k, depth + 1));
    }
    return details;
  }
  const text = scalarText(value);
  if (typeof value === 'string' && (value.length > 80 || value.includes('\n'))) {
    const details = el('details', `${CLASS}-tree`);
    details.appendChild(el('summary', undefined, `${key}: string (${value.length} characters)`));
    details.appendChild(el('pre', `${CLASS}-pre`, value));
    return details;
  }
  const leaf = el('div', `${CLASS}-leaf`);
  leaf.appendChild(el('span', `${CLASS}-key`, key === null ? '' : `${key}: `));
  leaf.appendChild(el('span', `${CLASS}-value`, text));
  return leaf;
}

function renderImage(name: string, b64: string): HTMLElement {
  if (!BASE64.test(b64)) {
    return el('div', `${CLASS}-error`, `image '${name}' is not base64 PNG data`);
  }
  const img = document.createElement('img');
  img.className = `${CLASS}-image`;
  img.alt = `${IMAGE_TITLES[name] || name} of the kernel`;
  img.src = `data:image/png;base64,${b64.replace(/\s/g, '')}`;
  return img;
}

/** The sections present in `data`, in tab order: [title, content]. */
function sections(data: { [key: string]: JSONValue }): [string, HTMLElement][] {
  const out: [string, HTMLElement][] = [];
  if (typeof data.summary === 'string') {
    out.push(['Summary', el('pre', `${CLASS}-pre`, data.summary)]);
  }
  if (typeof data.ir === 'string') {
    out.push(['IR', renderIr(data.ir)]);
  }
  if (data.config !== undefined && data.config !== null) {
    out.push(['Config', renderTree(data.config, null, 0)]);
  }
  const images = data.images;
  if (images !== null && typeof images === 'object' && !Array.isArray(images)) {
    const names = Object.keys(images);
    const ordered = IMAGE_ORDER.filter(n => names.includes(n)).concat(
      names.filter(n => !IMAGE_ORDER.includes(n)).sort()
    );
    for (const name of ordered) {
      const b64 = images[name];
      if (typeof b64 === 'string' && b64.length > 0) {
        out.push([IMAGE_TITLES[name] || name, renderImage(name, b64)]);
      }
    }
  }
  return out;
}

/** One tab of the Python Inspector model (`inspector.tabs`). */
interface IInspectorTab {
  title: string;
  key: string;
  failed: boolean;
  image: string | null;
  html: string;
}

function inspectorTabs(data: { [key: string]: JSONValue }): IInspectorTab[] | null {
  const insp = data.inspector;
  if (insp === null || typeof insp !== 'object' || Array.isArray(insp)) {
    return null;
  }
  const tabs = insp.tabs;
  if (!Array.isArray(tabs)) {
    return null;
  }
  const out: IInspectorTab[] = [];
  for (const t of tabs) {
    if (t === null || typeof t !== 'object' || Array.isArray(t) || typeof t.title !== 'string') {
      continue;
    }
    out.push({
      title: t.title,
      key: typeof t.key === 'string' ? t.key : t.title,
      failed: t.failed === true,
      image: typeof t.image === 'string' ? t.image : null,
      html: typeof t.html === 'string' ? t.html : ''
    });
  }
  return out;
}

/** The Inspector model's tabs, laid out: [title, content, failed]. */
function modelSections(
  data: { [key: string]: JSONValue },
  tabs: IInspectorTab[],
  sanitizer: IRenderMime.ISanitizer
): [string, HTMLElement, boolean][] {
  const images = data.images;
  const pictures =
    images !== null && typeof images === 'object' && !Array.isArray(images) ? images : {};
  return tabs.map(tab => {
    const content = el('div', `${CLASS}-body`);
    content.dataset.tab = tab.key;
    const b64 = tab.image === null ? undefined : pictures[tab.image];
    if (tab.image !== null && typeof b64 === 'string' && b64.length > 0) {
      content.appendChild(renderImage(tab.image, b64));
    }
    const body = el('div', `${CLASS}-html`);
    body.innerHTML = sanitizer.sanitize(tab.html);
    content.appendChild(body);
    return [tab.title, content, tab.failed];
  });
}

/** Renders one Inspection output. */
export class InspectionRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this._sanitizer = options.sanitizer;
    this.addClass(CLASS);
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const node = this.node;
    node.textContent = '';
    const data = model.data[this._mimeType] as JSONValue;
    if (data === null || typeof data !== 'object' || Array.isArray(data)) {
      node.appendChild(
        el('div', `${CLASS}-error`, `${MIME_TYPE}: expected a JSON object, got ${typeof data}`)
      );
      return Promise.resolve();
    }
    const kernel = typeof data.kernel === 'string' ? data.kernel : '(unnamed kernel)';
    const header = el('div', `${CLASS}-header`);
    header.appendChild(el('span', `${CLASS}-badge`, 'NKI'));
    header.appendChild(el('span', `${CLASS}-kernel`, kernel));
    node.appendChild(header);

    const tabs = inspectorTabs(data);
    const parts: [string, HTMLElement, boolean][] =
      tabs === null
        ? sections(data).map(([t, c]) => [t, c, false] as [string, HTMLElement, boolean])
        : modelSections(data, tabs, this._sanitizer);
    const bar = el('div', `${CLASS}-tabs`);
    bar.setAttribute('role', 'tablist');
    const panels = el('div', `${CLASS}-panels`);
    const buttons: HTMLElement[] = [];
    const select = (index: number) => {
      buttons.forEach((b, i) => {
        b.classList.toggle(`${CLASS}-tab-active`, i === index);
        b.setAttribute('aria-selected', String(i === index));
        (panels.children[i] as HTMLElement).style.display = i === index ? '' : 'none';
      });
    };
    parts.forEach(([title, content, failed], i) => {
      const button = el('button', `${CLASS}-tab`, title);
      button.setAttribute('role', 'tab');
      button.dataset.tab = title;
      if (failed) {
        // why: a failed check marks its tab, as in the widget, so it is seen from any tab
        button.classList.add(`${CLASS}-tab-failed`);
        node.classList.add(`${CLASS}-failed`);
      }
      button.addEventListener('click', () => select(i));
      buttons.push(button);
      bar.appendChild(button);
      const panel = el('div', `${CLASS}-panel`);
      panel.setAttribute('role', 'tabpanel');
      panel.appendChild(content);
      panels.appendChild(panel);
    });
    if (parts.length === 0) {
      node.appendChild(el('div', `${CLASS}-error`, 'nothing to show: no summary, IR, config or images'));
    } else {
      node.appendChild(bar);
      node.appendChild(panels);
      select(0);
    }
    return Promise.resolve();
  }

  private _mimeType: string;
  private _sanitizer: IRenderMime.ISanitizer;
}

/** The renderer factory: `safe` because HTML is sanitized and nothing runs as script. */
export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE],
  createRenderer: options => new InspectionRenderer(options)
};

/** The mime extension: rank 0 so it wins over the text/html fallback (rank 50). */
const extension: IRenderMime.IExtension = {
  id: 'nki-workbench-labext:inspection',
  rendererFactory,
  rank: 0,
  dataType: 'json'
};

export default extension;
