/**
 * JupyterLab mime renderer for nki_workbench Inspections.
 *
 * Renders `application/vnd.nki-workbench.inspection+json` (schema: docs/mime.md): a header with the
 * kernel name, then tabs Summary | IR | Config | one per image.  All text goes in through
 * `textContent` (never HTML), images only as `data:image/png;base64,` of validated base64.
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

/** Renders one Inspection output. */
export class InspectionRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
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

    const parts = sections(data);
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
    parts.forEach(([title, content], i) => {
      const button = el('button', `${CLASS}-tab`, title);
      button.setAttribute('role', 'tab');
      button.dataset.tab = title;
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
}

/** The renderer factory: `safe` because nothing is interpreted as HTML or script. */
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
