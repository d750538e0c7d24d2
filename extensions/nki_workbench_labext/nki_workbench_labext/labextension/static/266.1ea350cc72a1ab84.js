"use strict";(self.rspackChunknki_workbench_labext=self.rspackChunknki_workbench_labext||[]).push([[266],{646(e,r,o){var t=o(601),n=o.n(t),i=o(314),a=(o.n(i))()(n());a.push([e.id,`/* nki_workbench Inspection renderer; JupyterLab theme variables so light and dark themes work. */
.jp-NkiInspection {
  border-left: 3px solid var(--jp-warn-color1, #f57c00);
  padding: 2px 0 4px 8px;
  font-size: var(--jp-code-font-size);
}

.jp-NkiInspection-header {
  display: flex;
  gap: 8px;
  align-items: center;
  margin-bottom: 4px;
}

.jp-NkiInspection-badge {
  background: var(--jp-warn-color1, #f57c00);
  color: var(--jp-ui-inverse-font-color0, #fff);
  border-radius: 3px;
  padding: 0 5px;
  font-weight: bold;
  font-size: var(--jp-ui-font-size0);
}

.jp-NkiInspection-kernel {
  font-family: var(--jp-code-font-family);
  font-weight: bold;
}

.jp-NkiInspection-tabs {
  display: flex;
  gap: 2px;
  border-bottom: 1px solid var(--jp-border-color1);
}

.jp-NkiInspection-tab {
  border: 1px solid var(--jp-border-color1);
  border-bottom: none;
  background: var(--jp-layout-color2);
  color: var(--jp-ui-font-color1);
  padding: 2px 10px;
  cursor: pointer;
  font-size: var(--jp-ui-font-size1);
}

.jp-NkiInspection-tab-active {
  background: var(--jp-layout-color0);
  font-weight: bold;
}

.jp-NkiInspection-panel {
  padding-top: 4px;
  max-height: 480px;
  overflow: auto;
}

.jp-NkiInspection-pre {
  font-family: var(--jp-code-font-family);
  margin: 0;
  white-space: pre;
}

.jp-NkiInspection-ir {
  border-collapse: collapse;
  font-family: var(--jp-code-font-family);
}

.jp-NkiInspection-ir td {
  padding: 0 6px;
  white-space: pre;
  text-align: left;
  vertical-align: top;
}

.jp-NkiInspection-lineno {
  color: var(--jp-ui-font-color3);
  text-align: right !important;
  user-select: none;
  border-right: 1px solid var(--jp-border-color2);
}

.jp-NkiInspection-ir-comment { color: var(--jp-mirror-editor-comment-color, #408080); font-style: italic; }
.jp-NkiInspection-ir-string { color: var(--jp-mirror-editor-string-color, #ba2121); }
.jp-NkiInspection-ir-keyword { color: var(--jp-mirror-editor-keyword-color, #008000); font-weight: bold; }
.jp-NkiInspection-ir-memory { color: var(--jp-mirror-editor-builtin-color, #7a4a00); }
.jp-NkiInspection-ir-op { color: var(--jp-mirror-editor-def-color, #00f); }
.jp-NkiInspection-ir-number { color: var(--jp-mirror-editor-number-color, #080); }

.jp-NkiInspection-tree {
  font-family: var(--jp-code-font-family);
  margin-left: 12px;
}

.jp-NkiInspection-tree > summary {
  cursor: pointer;
  margin-left: -12px;
}

.jp-NkiInspection-leaf .jp-NkiInspection-key { color: var(--jp-ui-font-color2); }

.jp-NkiInspection-image {
  max-width: 100%;
}

.jp-NkiInspection-error {
  color: var(--jp-error-color1, #d32f2f);
}

.jp-NkiInspection-failed {
  border-left-color: #b00020;
}

/* the widget's failed-check marker: the Summary tab title in the error colour */
.jp-NkiInspection-tab-failed {
  color: #b00020;
  font-weight: bold;
}

.jp-NkiInspection-html pre {
  margin: 0;
}
`,""]),o.d(r,{},{A:a})},314(e){e.exports=function(e){var r=[];return r.toString=function(){return this.map(function(r){var o="",t=void 0!==r[5];return r[4]&&(o+="@supports (".concat(r[4],") {")),r[2]&&(o+="@media ".concat(r[2]," {")),t&&(o+="@layer".concat(r[5].length>0?" ".concat(r[5]):""," {")),o+=e(r),t&&(o+="}"),r[2]&&(o+="}"),r[4]&&(o+="}"),o}).join("")},r.i=function(e,o,t,n,i){"string"==typeof e&&(e=[[null,e,void 0]]);var a={};if(t)for(var p=0;p<this.length;p++){var c=this[p][0];null!=c&&(a[c]=!0)}for(var s=0;s<e.length;s++){var l=[].concat(e[s]);t&&a[l[0]]||(void 0!==i&&(void 0===l[5]||(l[1]="@layer".concat(l[5].length>0?" ".concat(l[5]):""," {").concat(l[1],"}")),l[5]=i),o&&(l[2]&&(l[1]="@media ".concat(l[2]," {").concat(l[1],"}")),l[2]=o),n&&(l[4]?(l[1]="@supports (".concat(l[4],") {").concat(l[1],"}"),l[4]=n):l[4]="".concat(n)),r.push(l))}},r}},601(e){e.exports=function(e){return e[1]}},665(e,r,o){o.r(r);var t=o(72),n=o.n(t),i=o(825),a=o.n(i),p=o(659),c=o.n(p),s=o(56),l=o.n(s),d=o(540),f=o.n(d),u=o(113),m=o.n(u),v=o(646),h={};h.styleTagTransform=m(),h.setAttributes=l(),h.insert=c().bind(null,"head"),h.domAPI=a(),h.insertStyleElement=f(),n()(v.A,h);let b=v.A&&v.A.locals?v.A.locals:void 0;o.d(r,{},{default:b})},72(e){var r=[];function o(e){for(var o=-1,t=0;t<r.length;t++)if(r[t].identifier===e){o=t;break}return o}function t(e,t){for(var n={},i=[],a=0;a<e.length;a++){var p=e[a],c=t.base?p[0]+t.base:p[0],s=n[c]||0,l="".concat(c," ").concat(s);n[c]=s+1;var d=o(l),f={css:p[1],media:p[2],sourceMap:p[3],supports:p[4],layer:p[5]};if(-1!==d)r[d].references++,r[d].updater(f);else{var u=function(e,r){var o=r.domAPI(r);return o.update(e),function(r){r?(r.css!==e.css||r.media!==e.media||r.sourceMap!==e.sourceMap||r.supports!==e.supports||r.layer!==e.layer)&&o.update(e=r):o.remove()}}(f,t);t.byIndex=a,r.splice(a,0,{identifier:l,updater:u,references:1})}i.push(l)}return i}e.exports=function(e,n){var i=t(e=e||[],n=n||{});return function(e){e=e||[];for(var a=0;a<i.length;a++){var p=o(i[a]);r[p].references--}for(var c=t(e,n),s=0;s<i.length;s++){var l=o(i[s]);0===r[l].references&&(r[l].updater(),r.splice(l,1))}i=c}}},659(e){var r={};e.exports=function(e,o){var t=function(e){if(void 0===r[e]){var o=document.querySelector(e);if(window.HTMLIFrameElement&&o instanceof window.HTMLIFrameElement)try{o=o.contentDocument.head}catch(e){o=null}r[e]=o}return r[e]}(e);if(!t)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");t.appendChild(o)}},540(e){e.exports=function(e){var r=document.createElement("style");return e.setAttributes(r,e.attributes),e.insert(r,e.options),r}},56(e,r,o){e.exports=function(e){var r=o.nc;r&&e.setAttribute("nonce",r)}},825(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var r=e.insertStyleElement(e);return{update:function(o){var t,n,i;t="",o.supports&&(t+="@supports (".concat(o.supports,") {")),o.media&&(t+="@media ".concat(o.media," {")),(n=void 0!==o.layer)&&(t+="@layer".concat(o.layer.length>0?" ".concat(o.layer):""," {")),t+=o.css,n&&(t+="}"),o.media&&(t+="}"),o.supports&&(t+="}"),(i=o.sourceMap)&&"u">typeof btoa&&(t+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(i))))," */")),e.styleTagTransform(t,r,e.options)},remove:function(){var e;null===(e=r).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,r){if(r.styleSheet)r.styleSheet.cssText=e;else{for(;r.firstChild;)r.removeChild(r.firstChild);r.appendChild(document.createTextNode(e))}}}}]);