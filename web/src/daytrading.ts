// The day-trading page: log in as a user (userid, and an API key named after it unless
// the gateway is open), add funds, quote, buy or sell with 60 seconds to commit or
// cancel, set and cancel triggers, and the user's summary, polled every few seconds so
// a trigger that fires shows without a reload. Every call is one /v1/daytrading route
// (types from the OpenAPI document); errors show the exchange's errorMessage.
import './style.css';
import { ApiError, el, request, useKey } from './api';
import type { components } from './schema';

type Schemas = components['schemas'];
type DtResult = Schemas['DtResult'];
type DtSummary = Schemas['DtSummary'];

const POLL_MS = 3_000;
const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const value = (id: string) => $<HTMLInputElement>(id).value.trim();

let user = '';
/** Server stamp minus local clock, from the last summary: the countdowns use server time. */
let clockOffset = 0;
let summary: DtSummary | undefined;
let poller: number | undefined;

function say(text: string, kind: 'ok' | 'error' = 'ok'): void {
  const message = $('message');
  message.textContent = text;
  message.className = `message ${kind}`;
  message.dataset.kind = kind;
}

function explain(error: unknown): string {
  if (error instanceof ApiError) return `${error.message} (${error.status} ${error.name_})`;
  return String(error);
}

const path = (rest: string) => `/v1/daytrading/users/${encodeURIComponent(user)}${rest}`;

/** Runs one command, says how it went, and refreshes the summary. */
async function run(what: string, method: string, rest: string, body?: unknown): Promise<DtResult | undefined> {
  try {
    const result = await request<DtResult>(method, path(rest), body);
    say(`${what}: ${describe(result)}`);
    return result;
  } catch (error) {
    say(`${what} failed: ${explain(error)}`, 'error');
    return undefined;
  } finally {
    await refresh();
  }
}

function describe(r: DtResult): string {
  const parts = [`#${r.transactionNum} ${r.command}`];
  if (r.symbol) parts.push(r.symbol);
  if (r.shares != null) parts.push(`${r.shares} shares`);
  if (r.price != null) parts.push(`at $${r.price}`);
  if (r.amount != null) parts.push(`$${r.amount}`);
  return parts.join(' ');
}

async function refresh(): Promise<void> {
  if (!user) return;
  try {
    summary = await request<DtSummary>('GET', path('/summary'));
    clockOffset = summary.asOf - Date.now();
    render(summary);
  } catch (error) {
    if (error instanceof ApiError && error.name_ === 'unknown_user') {
      summary = undefined;
      render(undefined);
      $('as-of').textContent = '(new user: add funds to open the account)';
      return;
    }
    say(`summary: ${explain(error)}`, 'error');
  }
}

function row(cells: (Node | string)[], attrs: Record<string, string> = {}, header = false): HTMLTableRowElement {
  return el('tr', attrs, ...cells.map((c) => el(header ? 'th' : 'td', {}, c)));
}

function render(s: DtSummary | undefined): void {
  $('cash-available').textContent = s ? `$${s.cash.available}` : '—';
  $('cash-reserved').textContent = s ? `$${s.cash.reserved}` : '—';
  $('as-of').textContent = s ? `as of ${new Date(s.asOf).toLocaleTimeString()}` : '';
  const holdings = $('holdings');
  holdings.replaceChildren(row(['Symbol', 'Available', 'Reserved'], {}, true));
  for (const h of s?.holdings ?? []) {
    holdings.append(
      row([h.symbol, String(h.available), String(h.reserved)], {
        'data-testid': 'holding',
        'data-symbol': h.symbol,
        'data-available': String(h.available),
      }),
    );
  }
  const triggers = $('triggers');
  triggers.replaceChildren(row(['Symbol', 'Side', 'Amount', 'Trigger price', 'Shares held', ''], {}, true));
  const triggerRow = (side: 'buy' | 'sell', symbol: string, amount: string, price: string | null | undefined, shares: string) => {
    const cancel = el('button', { 'data-testid': 'cancel-trigger', 'data-side': side, 'data-symbol': symbol }, 'Cancel');
    cancel.addEventListener('click', () =>
      void run(`cancel ${side} trigger`, 'DELETE', `/${side}-triggers/${encodeURIComponent(symbol)}`),
    );
    const attrs = { 'data-testid': 'trigger', 'data-side': side, 'data-symbol': symbol, 'data-armed': String(price != null) };
    triggers.append(row([symbol, side, `$${amount}`, price != null ? `$${price}` : 'not set', shares, cancel], attrs));
  };
  for (const t of s?.buyTriggers ?? []) triggerRow('buy', t.symbol, t.amount, t.triggerPrice, '');
  for (const t of s?.sellTriggers ?? []) triggerRow('sell', t.symbol, t.amount, t.triggerPrice, String(t.reservedShares));
  const history = $('history');
  history.replaceChildren(row(['#', 'Time', 'Command', 'Outcome'], {}, true));
  // The page's own polling makes every other command a DISPLAY_SUMMARY: those are not shown.
  for (const h of (s?.history.recent ?? []).filter((item) => item.command !== 'DISPLAY_SUMMARY')) {
    const outcome = el('span', { class: h.outcome === 'ok' ? 'up' : 'down' }, h.outcome);
    history.append(row([String(h.transactionNum), new Date(h.stamp).toLocaleTimeString(), h.command, outcome]));
  }
  $('history-total').textContent = s ? `(${s.history.total} in all)` : '';
  renderPending();
}

/** The pending BUY and SELL with their countdowns and commit/cancel buttons. */
function renderPending(): void {
  const box = $('pending');
  box.replaceChildren();
  const sides: ['buy' | 'sell', Schemas['DtPendingBuy'] | Schemas['DtPendingSell'] | null | undefined][] = [
    ['buy', summary?.pendingBuy],
    ['sell', summary?.pendingSell],
  ];
  for (const [side, pending] of sides) {
    if (!pending) continue;
    const money = 'cost' in pending ? `cost $${pending.cost}` : `proceeds $${pending.proceeds}`;
    const commit = el('button', { id: `commit-${side}` }, `Commit ${side}`);
    const cancel = el('button', { id: `cancel-${side}` }, `Cancel ${side}`);
    commit.addEventListener('click', () => void run(`commit ${side}`, 'POST', `/${side}/commit`));
    cancel.addEventListener('click', () => void run(`cancel ${side}`, 'POST', `/${side}/cancel`));
    const countdown = el('span', { class: 'countdown', id: `${side}-countdown`, 'data-expires-at': String(pending.expiresAt) });
    box.append(
      el(
        'div',
        { class: 'pending', 'data-testid': `pending-${side}` },
        el('div', {}, `${side.toUpperCase()} ${pending.shares} ${pending.symbol} at $${pending.price} (${money}) `, countdown),
        el('div', {}, commit, ' ', cancel),
      ),
    );
  }
  tick();
}

/** Updates the countdowns from server time. */
function tick(): void {
  const now = Date.now() + clockOffset;
  for (const countdown of document.querySelectorAll<HTMLElement>('.countdown')) {
    const left = Math.max(0, Math.ceil((Number(countdown.dataset.expiresAt) - now) / 1000));
    countdown.textContent = left > 0 ? `${left} s left` : 'expired';
    countdown.dataset.left = String(left);
    countdown.closest('.pending')?.classList.toggle('expired', left === 0);
  }
}

async function login(userid: string, key: string): Promise<void> {
  user = userid;
  useKey(key);
  sessionStorage.setItem('dt-user', userid);
  sessionStorage.setItem('dt-key', key);
  $('who').textContent = `logged in as ${userid}`;
  $('who').dataset.user = userid;
  $('login-panel').hidden = true;
  $('logout').hidden = false;
  $('app').hidden = false;
  say('');
  await refresh();
  if (poller !== undefined) clearInterval(poller);
  poller = window.setInterval(() => void refresh(), POLL_MS);
}

$('login-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const userid = value('userid');
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(userid)) {
    say('a user id is 1 to 64 letters, digits, _ or -', 'error');
    return;
  }
  void login(userid, value('key'));
});
$('logout').addEventListener('click', () => {
  sessionStorage.removeItem('dt-user');
  sessionStorage.removeItem('dt-key');
  location.reload();
});
$('add-form').addEventListener('submit', (event) => {
  event.preventDefault();
  void run('add funds', 'POST', '/add', { amount: value('add-amount') });
});
$('quote-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const result = await run('quote', 'POST', '/quote', { symbol: value('quote-symbol') });
  const shown = $('quote-result');
  if (result) {
    shown.textContent = `${result.symbol} $${result.price}`;
    shown.dataset.price = result.price ?? '';
  }
});
for (const side of ['buy', 'sell'] as const) {
  $(side).addEventListener('click', () =>
    void run(side, 'POST', `/${side}`, { symbol: value('trade-symbol'), amount: value('trade-amount') }),
  );
}
const triggerPath = (what: string) =>
  `/${$<HTMLSelectElement>('trigger-side').value}-triggers/${encodeURIComponent(value('trigger-symbol'))}/${what}`;
$('set-amount').addEventListener('click', () =>
  void run('set trigger amount', 'PUT', triggerPath('amount'), { amount: value('trigger-amount') }),
);
$('set-price').addEventListener('click', () =>
  void run('set trigger price', 'PUT', triggerPath('price'), { price: value('trigger-price') }),
);
$('dumplog').addEventListener('click', async (event) => {
  event.preventDefault();
  // Fetched with the key (a plain link could not carry it), then saved from memory.
  const headers: Record<string, string> = {};
  const key = sessionStorage.getItem('dt-key');
  if (key) headers['authorization'] = `Bearer ${key}`;
  const response = await fetch(path(`/dumplog?filename=${encodeURIComponent(`${user}.xml`)}`), { headers });
  if (!response.ok) {
    say(`audit log: ${(await response.json()).error?.message ?? response.status}`, 'error');
    return;
  }
  const link = el('a', { href: URL.createObjectURL(await response.blob()), download: `${user}.xml` });
  link.click();
});
setInterval(tick, 250);

const saved = sessionStorage.getItem('dt-user');
if (saved) void login(saved, sessionStorage.getItem('dt-key') ?? '');
