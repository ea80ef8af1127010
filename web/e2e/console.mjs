// End-to-end test of the gpucloud console in Debian's headless Chromium, driven by Playwright.
// Run by web/e2e_test.go, which starts the real apiserver and database and passes, in the
// environment: BASE_URL, CHROMIUM, ARTIFACTS, PASSWORD, TENANT_A, TENANT_B, OPERATOR and FINANCE.
// Exits non-zero on the first failed expectation.
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} is not set`); return v; };
const BASE = env('BASE_URL');
const ART = env('ARTIFACTS');
const PW = env('PASSWORD');
const TIMEOUT = 20000;

const browser = await chromium.launch({
  executablePath: env('CHROMIUM'),
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

let step = '';
const log = (s) => { step = s; console.log(`[e2e] ${s}`); };
const shot = (page, name) => page.screenshot({ path: path.join(ART, `${name}.png`), fullPage: true });

async function signedIn(email) {
  const ctx = await browser.newContext({ viewport: { width: 1366, height: 800 }, acceptDownloads: true });
  ctx.setDefaultTimeout(TIMEOUT);
  const page = await ctx.newPage();
  page.on('pageerror', (e) => { console.error(`[page error] ${e.message}`); process.exitCode = 1; });
  await page.goto(BASE + '/');
  await page.waitForURL(/#\/signin$/);
  await page.getByLabel('E-mail').fill(email);
  await page.getByLabel('Password').fill(PW);
  await page.getByLabel('Password').press('Enter'); // keyboard submit
  await page.getByTestId('who').filter({ hasText: email }).waitFor();
  assert.equal(await page.locator('#flash .error').count(), 0, 'a fresh sign-in shows no error');
  return page;
}

const rowState = (page, name) => page.locator(`tr[data-name="${name}"] [data-state]`);

try {
  log('sign-in page shows the API error next to the password field');
  {
    const ctx = await browser.newContext({ viewport: { width: 1366, height: 800 } });
    const page = await ctx.newPage();
    await page.goto(BASE + '/');
    await page.getByLabel('E-mail').fill(env('TENANT_A'));
    await page.getByLabel('Password').fill('not the password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.locator('#err-password').filter({ hasText: 'wrong e-mail or password' }).waitFor({ timeout: TIMEOUT });
    assert.equal(await page.getByLabel('Password').getAttribute('aria-invalid'), 'true');
    await shot(page, '01-signin-error');
    await ctx.close();
  }

  log('tenant A signs in and creates a GPU VM, seeing the price first');
  const a = await signedIn(env('TENANT_A'));
  await a.waitForURL(/#\/instances$/);

  log('at 390 px the top bar wraps: no two of its items overlap');
  const wide = a.viewportSize();
  await a.setViewportSize({ width: 390, height: 844 });
  const boxes = await a.locator('header.top .brand, header.top nav a, header.top .who > *').evaluateAll((els) =>
    els.map((e) => { const r = e.getBoundingClientRect(); return { x: r.x, y: r.y, w: r.width, h: r.height, t: e.textContent.trim() }; })
      .filter((b) => b.w > 0 && b.h > 0));
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const p = boxes[i], q = boxes[j];
      const overlap = p.x < q.x + q.w - 1 && q.x < p.x + p.w - 1 && p.y < q.y + q.h - 1 && q.y < p.y + p.h - 1;
      assert.ok(!overlap, `"${p.t}" and "${q.t}" overlap at 390 px`);
    }
  }
  await shot(a, '01a-narrow-390px');
  await a.setViewportSize(wide);

  log('tenant A adds an SSH key (a malformed one is refused by the field); the page shows its fingerprint');
  await a.getByRole('link', { name: 'API keys' }).click();
  await a.getByLabel('Name for this SSH key').fill('laptop');
  await a.getByLabel('Public key').fill('ssh-ed25519 not-a-key');
  await a.getByRole('button', { name: 'Add SSH key' }).click();
  await a.locator('#err-public_key').filter({ hasText: 'OpenSSH public key' }).waitFor();
  await a.getByLabel('Public key').fill(env('SSH_PUBLIC_KEY'));
  await a.getByRole('button', { name: 'Add SSH key' }).click();
  await a.locator('[data-testid="ssh-keys"] tr[data-name="laptop"]').filter({ hasText: env('SSH_FINGERPRINT') }).waitFor();
  await shot(a, '01b-ssh-keys');
  await a.getByRole('link', { name: 'Instances' }).click();
  await a.getByRole('link', { name: 'Create GPU VM' }).click();
  await a.getByTestId('ssh-key-choice').getByText('laptop').waitFor();
  await a.getByLabel('GPU model').selectOption({ label: 'H100 80GB (80 GiB)' });
  await a.getByLabel('Tier').selectOption('dedicated');
  await a.getByLabel('GPU count').selectOption('1');
  const typeOptions = await a.getByLabel('Instance type').locator('option').allTextContents();
  assert.deepEqual(typeOptions.filter((o) => o.startsWith('h1') || o.startsWith('cpu')).map((o) => o.split(':')[0]), ['h100-dedicated-1'],
    'filters narrow the instance types to the dedicated 1 x H100 one');
  await a.getByLabel('Instance type').selectOption({ index: 1 });
  await a.getByTestId('price').filter({ hasText: '$3.00 per hour' }).waitFor();
  await a.getByLabel('Name').fill('e2e-vm');
  const imageOptions = await a.getByLabel('Image').locator('option').allTextContents();
  assert.deepEqual(imageOptions.slice(1).map((o) => o.split(/[ ,]/)[0]), ['demo', 'ubuntu-24.04'], 'the form offers the registered images');
  await a.getByLabel('Image').selectOption('ubuntu-24.04');
  await a.getByLabel('SSH public key').fill('hello'); // the API refuses it: its error shows by the field
  await a.getByRole('button', { name: 'Review' }).click();
  await a.getByRole('button', { name: /^Confirm: create for \$3\.00\/hour$/ }).click();
  await a.locator('#err-ssh_key').filter({ hasText: 'OpenSSH' }).waitFor();
  await shot(a, '02-create-field-error');
  await a.getByLabel('SSH public key').fill('');
  await a.getByRole('button', { name: 'Review' }).click();
  await shot(a, '03-create-confirm');
  await a.getByRole('button', { name: /^Confirm: create/ }).click();

  log('the details page follows the VM to running without a reload');
  await a.waitForURL(/#\/instances\/[0-9a-f-]{36}$/);
  const instURL = a.url();
  await a.locator('h1 [data-state="running"]').waitFor({ timeout: 30000 });
  await a.locator('pre.log').filter({ hasText: '→ running' }).waitFor();
  await a.getByTestId('ssh-command').filter({ hasText: 'ssh -p 22001 root@vmhost.example' }).waitFor();
  await a.getByTestId('console-log').filter({ hasText: 'e2e-vm login:' }).waitFor();
  await shot(a, '04-instance-details');

  log('the interactive console: xterm.js from this origin, keystrokes to the guest and its output back');
  await a.getByTestId('terminal-open').click();
  await a.getByTestId('terminal-status').filter({ hasText: 'Connected to the serial console' }).waitFor();
  await a.getByTestId('terminal').filter({ hasText: 'e2e-vm login:' }).waitFor();
  await a.keyboard.type('root');
  await a.keyboard.press('Enter');
  await a.getByTestId('terminal').filter({ hasText: 'typed: root' }).waitFor();
  await shot(a, '04b-interactive-console');
  await a.getByTestId('terminal-open').click(); // Disconnect
  await a.getByTestId('terminal-status').filter({ hasText: 'Disconnected' }).waitFor();

  log('tenant A creates a volume (a size of 0 is refused by the field), attaches it to the VM, detaches and deletes it');
  await a.getByRole('link', { name: 'Volumes' }).click();
  await a.getByLabel('Name').fill('data');
  await a.getByLabel('Size (GiB)').fill('0');
  await a.getByRole('button', { name: 'Create volume' }).click();
  await a.locator('#err-size_gib').filter({ hasText: '1-16384' }).waitFor();
  await a.getByLabel('Size (GiB)').fill('10');
  await a.getByRole('button', { name: 'Create volume' }).click();
  const vol = a.locator('[data-testid="volumes"] tr[data-name="data"]');
  await vol.filter({ hasText: 'available' }).waitFor();
  await a.getByLabel('Instance for volume data').selectOption({ label: 'e2e-vm' });
  await vol.getByRole('button', { name: 'Attach' }).click();
  await vol.filter({ hasText: 'attached' }).filter({ hasText: 'e2e-vm (vdb)' }).waitFor();
  assert.ok(await vol.getByRole('button', { name: 'Delete' }).isDisabled(), 'an attached volume cannot be deleted');
  await shot(a, '04a-volume-attached');
  await vol.getByRole('button', { name: 'Detach' }).click();
  await vol.filter({ hasText: 'available' }).waitFor();
  await vol.getByRole('button', { name: 'Delete' }).click();
  await a.locator('#confirm-ok').click();
  await a.locator('[data-testid="volumes"]').filter({ hasText: 'No volumes yet.' }).waitFor();
  await a.goto(instURL);

  log('a VM on a silent host is marked in the list and warned about on its page, naming no host');
  await a.goto(BASE + '/#/instances');
  await a.locator('tr[data-name="silent-vm"] [data-condition="HostReachable"]').filter({ hasText: 'host unreachable' }).waitFor();
  assert.equal(await a.locator('tr[data-name="e2e-vm"] [data-condition]').count(), 0, 'a VM on a live host carries no warning');
  await a.locator('tr[data-name="silent-vm"] a').click();
  const warning = a.getByTestId('conditions');
  await warning.filter({ hasText: 'This VM may be unavailable.' }).filter({ hasText: 'stopped reporting' }).waitFor();
  assert.equal(await a.getByText('host-2').count(), 0, 'the tenant\'s page names no host');
  await shot(a, '04b-instance-unreachable-host');
  await a.goto(instURL);
  await a.locator('h1 [data-state="running"]').waitFor();
  assert.equal(await a.getByTestId('conditions').count(), 0, 'a VM on a live host shows no warning');

  log('tenant B cannot reach tenant A\'s instance page');
  const b = await signedIn(env('TENANT_B'));
  await b.goto(instURL);
  await b.getByTestId('not-found').waitFor();
  assert.equal(await b.getByText('e2e-vm').count(), 0, 'tenant B must not see the name of tenant A\'s VM');
  await b.goto(BASE + '/#/instances');
  await b.locator('[data-testid="instances"]').getByText('No instances yet.').waitFor();
  await shot(b, '05-tenant-b-not-found');

  log('tenant B changes the console password (wrong current one refused) and signs in with the new one');
  await b.getByRole('link', { name: 'API keys' }).click();
  await b.getByLabel('Current password').fill('not my password');
  await b.getByLabel('New password').fill('a brand new password');
  await b.getByRole('button', { name: 'Change password' }).click();
  await b.locator('#err-current_password').filter({ hasText: 'is not your current password' }).waitFor();
  await b.getByLabel('Current password').fill(PW);
  await b.getByRole('button', { name: 'Change password' }).click();
  await b.waitForURL(/#\/signin$/);
  await b.locator('#flash .msg:not(.error)').filter({ hasText: 'Password changed' }).waitFor();
  await b.getByLabel('E-mail').fill(env('TENANT_B'));
  await b.getByLabel('Password').fill(PW);
  await b.getByRole('button', { name: 'Sign in' }).click();
  await b.locator('#err-password').filter({ hasText: 'wrong e-mail or password' }).waitFor();
  await b.getByLabel('Password').fill('a brand new password');
  await b.getByRole('button', { name: 'Sign in' }).click();
  await b.getByTestId('who').filter({ hasText: env('TENANT_B') }).waitFor();
  await b.getByRole('button', { name: 'Sign out' }).click();
  await b.waitForURL(/#\/signin$/);
  await b.goto(BASE + '/#/instances');
  await b.waitForURL(/#\/signin$/); // signed out for real: the console cannot load pages

  log('tenant A stops the VM from the list (with confirmation) and watches it stop');
  await a.goto(BASE + '/#/instances');
  await rowState(a, 'e2e-vm').and(a.locator('[data-state="running"]')).waitFor();
  await shot(a, '06-instances');
  await a.getByRole('button', { name: 'stop e2e-vm' }).click();
  await a.getByRole('dialog').getByText('Stop e2e-vm?').waitFor();
  await a.keyboard.press('Escape'); // cancelling does nothing
  await a.waitForTimeout(500);
  assert.equal(await rowState(a, 'e2e-vm').getAttribute('data-state'), 'running');
  await a.getByRole('button', { name: 'stop e2e-vm' }).click();
  await a.locator('#confirm-ok').click();
  await rowState(a, 'e2e-vm').and(a.locator('[data-state="stopped"]')).waitFor({ timeout: 30000 });

  log('tenant A deletes it and sees it disappear');
  await a.getByRole('button', { name: 'delete e2e-vm' }).click();
  await a.locator('#confirm-ok').click();
  await a.locator('tr[data-name="e2e-vm"]').waitFor({ state: 'detached', timeout: 30000 });
  await shot(a, '07-instances-after-delete');

  log('API keys: create one, its secret is shown once');
  await a.getByRole('link', { name: 'API keys' }).click();
  await a.getByLabel('Key name').fill('e2e-key');
  await a.getByRole('button', { name: 'Create key' }).click();
  const secret = await a.getByTestId('new-secret').textContent();
  assert.match(secret, /^gcu_/);
  await a.locator('tr[data-name="e2e-key"]').waitFor();
  await shot(a, '08-api-keys');

  log('usage and invoices render with the estimated cost');
  await a.getByRole('link', { name: 'Usage & invoices' }).click();
  await a.locator('h2', { hasText: 'Invoices' }).waitFor();
  await a.waitForLoadState('networkidle');
  // 2 minutes of dedicated GPU at $2/GPU-hour = 6.67 cents; the shared minute has no price.
  await a.getByTestId('estimated-cost').filter({ hasText: 'estimated cost $0.07' }).waitFor();
  await a.getByTestId('usage-total').filter({ hasText: 'some usage has no price yet' }).waitFor();
  await shot(a, '09-usage');

  log('tenant A sets a monthly budget (bad thresholds refused, naming the field) and sees it');
  await a.getByText('No monthly budget.').waitFor();
  await a.getByLabel('Budget (USD per month)').fill('25');
  await a.getByLabel('Alert thresholds (%)').fill('80, 50');
  await a.getByRole('button', { name: 'Save budget' }).click();
  await a.locator('#err-thresholds').filter({ hasText: 'ascending' }).waitFor();
  await a.getByLabel('Alert thresholds (%)').fill('50, 90');
  await a.getByLabel('Hard stop').selectOption('block_create');
  await a.getByRole('button', { name: 'Save budget' }).click();
  await a.getByTestId('budget').filter({ hasText: 'Monthly budget $25.00, alerts at 50, 90%, hard stop: block_create.' }).waitFor();
  const bud = await (await a.request.get(`${BASE}/v1/budget`)).json();
  assert.deepEqual([bud.limit_cents, bud.thresholds, bud.hard_stop], [2500, [50, 90], 'block_create'], 'the API holds what the page set');

  log('tenant A registers a webhook endpoint (field error first), its secret shown once, and opens its delivery log');
  await a.getByRole('link', { name: 'Webhooks' }).click();
  await a.getByLabel('Endpoint URL').fill('https://hooks.a.example/gpucloud');
  await a.getByRole('button', { name: 'Add endpoint' }).click();
  await a.locator('.field-error[data-field="events"]').filter({ hasText: 'must list' }).waitFor();
  await a.getByLabel('instance.state').check();
  await a.getByLabel('credit.low').check();
  await a.getByRole('button', { name: 'Add endpoint' }).click();
  assert.match(await a.getByTestId('webhook-secret').textContent(), /^whsec_[0-9a-f]{64}$/);
  const hookRow = a.locator('[data-testid="webhooks"] tr[data-url="https://hooks.a.example/gpucloud"]');
  await hookRow.getByText('credit.low, instance.state').waitFor();
  await a.getByRole('button', { name: 'deliveries of https://hooks.a.example/gpucloud' }).click();
  await a.getByTestId('deliveries').waitFor();
  await shot(a, '09b-webhooks');

  log('operator: fleet capacity, cordon a host, tenants and quota field errors');
  const op = await signedIn(env('OPERATOR'));
  await op.waitForURL(/#\/fleet$/);
  await op.locator('[data-testid="hosts"] tr[data-name="host-1"]').waitFor();
  await op.locator('[data-testid="gpu-servers"] tr[data-name="gpu-1"]').getByText('#3 NVIDIA H100 80GB HBM3').waitFor();
  await op.getByRole('button', { name: 'cordon host-1' }).click();
  await op.locator('#confirm-ok').click();
  await op.locator('tr[data-name="host-1"] .badge', { hasText: 'cordoned' }).waitFor();
  await shot(op, '10-fleet');
  // A drain that moves work: gpu-1 holds no live VM, so the plan is empty and gpu-1 drains.
  await op.getByRole('button', { name: 'move work off gpu-1' }).click();
  await op.locator('#confirm-ok').click();
  await op.locator('#flash').getByText('gpu-1: 0 move(s) planned.').waitFor();
  await op.locator('tr[data-name="gpu-1"] .badge', { hasText: 'draining' }).waitFor();
  // A host's drain that moves VMs: host-2 offers no transfer endpoint (hostd --transfer-listen), so
  // its VM is named in the VM moves table with the reason.
  await op.getByRole('button', { name: 'move work off host-2' }).click();
  await op.locator('#confirm-ok').click();
  await op.locator('#flash').getByText('host-2: 1 move(s) planned.').waitFor();
  const silentMove = op.locator('[data-testid="host-moves"] tr', { hasText: 'silent-vm' });
  await silentMove.getByText('unplaced').waitFor();
  await silentMove.getByText('offers no transfer endpoint').waitFor();
  await op.getByRole('link', { name: 'Tenants' }).click();
  await op.locator('tr[data-name="tenant-a"] button').click();
  await op.getByLabel('Instances').fill('-1');
  await op.getByRole('button', { name: 'Save quotas' }).click();
  await op.locator('#err-instances').filter({ hasText: 'must not be negative' }).waitFor();
  await shot(op, '11-tenants-quota-error');

  log('finance: GPU-hour report per tier, CSV download matches the API');
  const fin = await signedIn(env('FINANCE'));
  await fin.waitForURL(/#\/reports$/);
  await fin.getByTestId('report').waitFor();
  await shot(fin, '12-report');
  const [download] = await Promise.all([fin.waitForEvent('download'), fin.getByTestId('download-csv').click()]);
  const file = path.join(ART, 'gpu-hours.csv');
  await download.saveAs(file);
  const got = await fs.readFile(file, 'utf8');
  const from = await fin.getByLabel('From').inputValue();
  const to = await fin.getByLabel('To (exclusive)').inputValue();
  const q = `from=${from}&to=${to}&group_by=tier&granularity=day`;
  const api = await fin.request.get(`${BASE}/v1/reports/gpu-hours?${q}&format=csv`);
  assert.equal(got, await api.text(), 'the downloaded CSV is what the API serves');
  const json = await (await fin.request.get(`${BASE}/v1/reports/gpu-hours?${q}`)).json();
  const lines = got.trim().split('\n').slice(1);
  assert.equal(lines.length, json.rows.length, 'one CSV row per report row');
  json.rows.forEach((r, i) => assert.ok(lines[i].startsWith(`${r.bucket},${r.group},${r.gpu_ms},${r.gpu_hours}`), `row ${i}`));
  assert.deepEqual(json.rows.map((r) => r.group).sort(), ['dedicated', 'shared'], 'one row per tier');
  const shown = await fin.locator('[data-testid="report"] tbody tr').allTextContents();
  assert.equal(shown.length, json.rows.length, 'the page shows every report row');

  log('finance sees every endpoint with its owner; tenant A deletes its own');
  await fin.getByRole('link', { name: 'Webhooks' }).click();
  await fin.locator('[data-testid="webhooks"] tr[data-url="https://hooks.a.example/gpucloud"]').getByText('tenant', { exact: true }).waitFor();
  await shot(fin, '13-webhooks-finance');
  await a.goto(BASE + '/#/webhooks');
  await a.getByRole('button', { name: 'delete https://hooks.a.example/gpucloud' }).click();
  await a.locator('#confirm-ok').click();
  await a.locator('[data-testid="webhooks"] tr[data-url="https://hooks.a.example/gpucloud"]').waitFor({ state: 'detached' });
  await a.getByText('No webhook endpoints.').waitFor();

  log('finance: month-close report, held vs utilised and revenue charts, table and CSV match the API');
  await fin.getByRole('link', { name: 'Month close' }).click();
  await fin.getByTestId('billing-report').waitFor();
  const month = await fin.getByLabel('Month').inputValue();
  const [y, mo] = month.split('-').map(Number);
  const bq = `from=${month}&to=${new Date(Date.UTC(y, mo, 1)).toISOString().slice(0, 7)}&group_by=tier`;
  const billing = await (await fin.request.get(`${BASE}/v1/reports/billing?${bq}`)).json();
  assert.ok(billing.rows.length > 0, 'tenant A held something this month');
  assert.equal((await fin.locator('[data-testid="billing-report"] tbody tr').allTextContents()).length, billing.rows.length, 'one table row per report row');
  // One bar segment per row and series that is not zero, in each chart.
  const bars = (id) => fin.locator(`[data-testid="${id}"] svg rect`).count();
  const nonzero = (k) => billing.rows.filter((r) => Number(r[k]) > 0).length;
  assert.equal(await bars('chart-hours'), billing.rows.length * 2, 'held and utilised bars (zero-height included)');
  assert.equal(await bars('chart-revenue'), billing.rows.length, 'a revenue bar per row');
  assert.ok(nonzero('held_gpu_hours') + nonzero('vm_hours') > 0, 'something held is charged');
  await fin.getByTestId('billing-total').filter({ hasText: `revenue ${billing.total.revenue}` }).waitFor();
  await shot(fin, '14-month-close');
  const [bdl] = await Promise.all([fin.waitForEvent('download'), fin.getByTestId('download-billing-csv').click()]);
  const bfile = path.join(ART, 'billing.csv');
  await bdl.saveAs(bfile);
  assert.equal(await fs.readFile(bfile, 'utf8'), await (await fin.request.get(`${BASE}/v1/reports/billing?${bq}&format=csv`)).text(), 'the downloaded CSV is what the API serves');
  console.log('[e2e] all steps passed');
} catch (e) {
  console.error(`[e2e] FAILED at step "${step}": ${e.stack || e}`);
  for (const [i, ctx] of browser.contexts().entries()) {
    for (const [j, p] of ctx.pages().entries()) await p.screenshot({ path: path.join(ART, `failure-${i}-${j}.png`) }).catch(() => {});
  }
  process.exitCode = 1;
} finally {
  await browser.close();
}
