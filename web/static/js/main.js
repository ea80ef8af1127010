// The console's router: hash routes (#/instances/ID), so the server only serves one page.
import { api, get, setUnauthenticatedHandler } from './api.js';
import { h, flash, newPage } from './ui.js';
import { signIn } from './pages/signin.js';
import { instanceList, instanceDetails } from './pages/instances.js';
import { createInstance } from './pages/create.js';
import { keys } from './pages/keys.js';
import { usage } from './pages/usage.js';
import { fleet } from './pages/fleet.js';
import { tenants } from './pages/tenants.js';
import { reports } from './pages/reports.js';
import { webhooks } from './pages/webhooks.js';
import { finance } from './pages/finance.js';
import { volumes } from './pages/volumes.js';

export const session = { me: null, user: null };

const tenantRoles = ['tenant-admin', 'tenant-member'];
const navByRole = {
  'tenant-admin': [['#/instances', 'Instances'], ['#/volumes', 'Volumes'], ['#/usage', 'Usage & invoices'], ['#/webhooks', 'Webhooks'], ['#/keys', 'API keys']],
  'tenant-member': [['#/instances', 'Instances'], ['#/volumes', 'Volumes'], ['#/usage', 'Usage & invoices'], ['#/keys', 'API keys']],
  operator: [['#/fleet', 'Fleet'], ['#/tenants', 'Tenants'], ['#/instances', 'Instances'], ['#/keys', 'API keys']],
  finance: [['#/reports', 'GPU-hour report'], ['#/finance', 'Month close'], ['#/webhooks', 'Webhooks'], ['#/tenants', 'Tenants'], ['#/keys', 'API keys']],
};

const routes = [
  [/^#\/signin$/, () => signIn],
  [/^#\/instances$/, () => instanceList],
  [/^#\/instances\/new$/, () => createInstance],
  [/^#\/instances\/([0-9a-f-]+)$/, () => instanceDetails],
  [/^#\/keys$/, () => keys],
  [/^#\/volumes$/, () => volumes],
  [/^#\/usage$/, () => usage],
  [/^#\/fleet$/, () => fleet],
  [/^#\/tenants$/, () => tenants],
  [/^#\/reports$/, () => reports],
  [/^#\/webhooks$/, () => webhooks],
  [/^#\/finance$/, () => finance],
];

export function home() {
  const r = session.me && session.me.role;
  return (navByRole[r] || [['#/signin']])[0][0];
}

async function loadSession() {
  try {
    session.me = await get('/v1/me');
    session.user = session.me.user_id ? await get('/v1/users/' + session.me.user_id) : null;
  } catch (e) {
    session.me = session.user = null;
    if (e.status !== 401) throw e;
  }
}

function renderChrome() {
  const nav = document.getElementById('nav');
  const who = document.getElementById('who');
  const items = (session.me && navByRole[session.me.role]) || [];
  nav.replaceChildren(...items.map(([href, label]) => h('a', { href }, label)));
  for (const a of nav.querySelectorAll('a')) {
    if (location.hash.startsWith(a.getAttribute('href'))) a.setAttribute('aria-current', 'page');
  }
  if (!session.me) { who.replaceChildren(); return; }
  who.replaceChildren(
    h('span', { 'data-testid': 'who' }, `${session.user ? session.user.email : ''} (${session.me.role})`),
    h('button', { onclick: signOut }, 'Sign out'));
}

async function signOut() {
  try { await api('DELETE', '/v1/session'); } catch { /* already gone */ }
  session.me = session.user = null;
  location.hash = '#/signin';
}

export async function route() {
  newPage();
  const main = document.getElementById('main');
  if (!session.me && location.hash !== '#/signin') {
    await loadSession();
    if (!session.me) { location.hash = '#/signin'; return; }
  }
  if (!location.hash || location.hash === '#/' || (session.me && location.hash === '#/signin')) {
    location.hash = session.me ? home() : '#/signin';
    return;
  }
  renderChrome();
  const hit = routes.find(([re]) => re.test(location.hash));
  main.replaceChildren();
  if (!hit) {
    main.append(h('h1', {}, 'Not found'), h('p', {}, 'No such page. '), h('a', { href: home() }, 'Go home'));
    return;
  }
  const args = location.hash.match(hit[0]).slice(1);
  try {
    await hit[1]()(main, session, ...args);
  } catch (e) {
    main.append(h('p', { class: 'error', role: 'alert' }, 'Could not load this page: ' + e.message));
  }
  main.focus({ preventScroll: true });
}

export const isTenant = () => session.me && tenantRoles.includes(session.me.role);

setUnauthenticatedHandler(() => {
  const had = session.me; // a first visit without a session is no news
  session.me = session.user = null;
  if (had && location.hash !== '#/signin') { flash('Your session has ended; please sign in again.', true); location.hash = '#/signin'; }
});
window.addEventListener('hashchange', route);
route();

export async function afterSignIn() {
  await loadSession();
  location.hash = home();
}
