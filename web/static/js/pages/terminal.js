// The interactive serial console: xterm.js (served from this origin, web/static/vendor, installed
// by scripts/web-vendor.sh) on a WebSocket to the apiserver. A ticket from an authenticated POST
// opens the WebSocket (browsers cannot put headers on one); text frames carry the server's
// status (first: opened or why not; last: why it closed), binary frames the terminal's bytes.
import { api } from '../api.js';
import { h, pageAlive } from '../ui.js';

let loading = null;

// loadXterm adds xterm.js and its stylesheet once; it resolves to the Terminal class, or null
// when this server was built without them.
function loadXterm() {
  if (!loading) {
    loading = new Promise((resolve) => {
      document.head.append(h('link', { rel: 'stylesheet', href: '/console/vendor/xterm/xterm.css' }));
      const s = h('script', { src: '/console/vendor/xterm/xterm.js' });
      s.addEventListener('load', () => resolve(window.Terminal || null));
      s.addEventListener('error', () => resolve(null));
      document.head.append(s);
    });
  }
  return loading;
}

// adoptStyles copies the text of the <style> elements xterm.js puts under root (its theme and
// cell sizes) into a constructed stylesheet: the console's Content-Security-Policy has no
// 'unsafe-inline', so the elements themselves are not applied.
function adoptStyles(root) {
  const sheet = new CSSStyleSheet();
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  const sync = () => sheet.replaceSync([...root.querySelectorAll('style')].map((s) => s.textContent).join('\n'));
  new MutationObserver(sync).observe(root, { subtree: true, childList: true, characterData: true });
  sync();
}

const reasons = {
  'idle-timeout': 'closed after a while without traffic',
  'console-closed': 'the VM\'s console ended (stopped or rebooting?)',
  'frame-too-large': 'closed: a paste was too large to send at once',
  ended: 'closed by the server (session time limit or restart)',
};

// terminalSection returns the instance page's interactive console: a button that opens it, a
// status line and the terminal. Leaving the page closes the session.
export function terminalSection(instanceId) {
  const status = h('p', { class: 'muted', role: 'status', 'data-testid': 'terminal-status' }, 'Not connected.');
  const screen = h('div', { class: 'terminal', 'data-testid': 'terminal' });
  let ws = null;
  let term = null;
  const button = h('button', { type: 'button', 'data-testid': 'terminal-open' }, 'Open interactive console');
  const setOpen = (open) => { button.textContent = open ? 'Disconnect' : 'Open interactive console'; };
  const stop = () => { if (ws) ws.close(); };
  const start = async () => {
    const Terminal = await loadXterm();
    if (!Terminal) {
      status.textContent = 'The terminal is not installed on this server (scripts/web-vendor.sh installs xterm.js).';
      return;
    }
    let ticket;
    try {
      ticket = await api('POST', `/v1/instances/${instanceId}/console/tickets`);
    } catch (e) {
      status.textContent = `Cannot open the console: ${e.message}`;
      return;
    }
    if (!term) {
      term = new Terminal({ convertEol: false, cursorBlink: true, rows: 24, cols: 100 });
      term.open(screen);
      adoptStyles(screen);
      term.onData((d) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(new TextEncoder().encode(d)); });
    }
    status.textContent = 'Connecting…';
    const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
    const sock = new WebSocket(scheme + location.host + ticket.url);
    sock.binaryType = 'arraybuffer';
    ws = sock;
    setOpen(true);
    let closedWhy = '';
    sock.addEventListener('message', (ev) => {
      if (typeof ev.data !== 'string') { term.write(new Uint8Array(ev.data)); return; }
      let m = {};
      try { m = JSON.parse(ev.data); } catch { return; }
      if (m.closed) closedWhy = reasons[m.closed] || `closed: ${m.closed}`;
      else if (m.status === 200) {
        status.textContent = 'Connected to the serial console (one session per instance; press Enter for a prompt).';
        term.focus();
      } else closedWhy = `Cannot open the console: ${m.detail || m.title || m.status}`;
    });
    sock.addEventListener('close', () => {
      if (ws === sock) ws = null;
      setOpen(false);
      status.textContent = closedWhy || 'Disconnected.';
    });
  };
  button.addEventListener('click', () => (ws ? stop() : start()));
  const alive = pageAlive();
  const watch = setInterval(() => { if (!alive()) { clearInterval(watch); stop(); } }, 1000);
  const section = h('section', { 'aria-label': 'Interactive console' },
    h('h2', {}, 'Interactive console'),
    h('p', { class: 'muted' }, 'The guest\'s serial console (ttyS0), live: log in and type. Opening and closing it is audited.'),
    h('div', { class: 'row' }, button), status, screen);
  return section;
}
