// The trading page: a person's orders on the exchange, through the REST API, with the
// best bid and offer, the key's own order events from the WebSocket, the account's
// positions in margin contracts (futures) with their margin, and the account's
// statement from the history store.
import { api, ApiError, apiKey, el, Feed, money, useKey, type AccountReport, type Symbol, type WsOrderEvent } from './api';
import './style.css';

let account = 0;
let symbols: Symbol[] = [];
const decimalsOf = new Map<number, number>();
// Margin symbols (futures): quote minor units per (price unit × contract).
const multiplierOf = new Map<number, number>();
const assetDecimals = new Map<number, number>();
const assetNames = new Map<number, string>();
const bbo = new Map<number, { bid?: number; ask?: number }>();
const events: WsOrderEvent[] = [];
// New prices typed into the open orders' move boxes, by order id: the table is rebuilt
// on every order event and every few seconds, and must not wipe what a person types.
const movePxDrafts = new Map<number, string>();

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

function say(text: string, ok: boolean): void {
  const message = $('message');
  message.textContent = text;
  message.className = `message ${ok ? 'ok' : 'error'}`;
}

function symbolName(id: number): string {
  return symbols.find((s) => s.id === id)?.name ?? String(id);
}

function cents(dollars: string, decimals: number): number {
  return Math.round(Number(dollars) * 10 ** decimals);
}

// Balances, positions, margin and open orders: one account report, read at one log index.
async function refresh(): Promise<void> {
  const report = await api.report(account);
  renderPositions(report);
  $('balances').replaceChildren(
    el('tr', {}, el('th', {}, 'asset'), el('th', {}, 'available'), el('th', {}, 'reserved')),
    ...report.balances.map((b) => {
      const decimals = assetDecimals.get(b.asset) ?? 0;
      return el('tr', {}, el('td', {}, b.asset_name), el('td', {}, money(b.available, decimals)), el('td', {}, money(b.reserved, decimals)));
    }),
  );
  // The box being typed in keeps its focus and caret across the rebuild.
  const active = document.activeElement;
  const focused = active instanceof HTMLInputElement && active.dataset.testid === 'move-px' ? Number(active.dataset.order) : undefined;
  const openIds = new Set(report.open_orders.map((o) => o.id));
  for (const id of movePxDrafts.keys()) if (!openIds.has(id)) movePxDrafts.delete(id);
  let refocus: HTMLInputElement | undefined;
  $('orders').replaceChildren(
    el('tr', {}, el('th', {}, 'order'), el('th', {}, 'symbol'), el('th', {}, 'side'), el('th', {}, 'price'), el('th', {}, 'open'), el('th', {}, 'filled'), el('th', {}, '')),
    ...report.open_orders.map((o) => {
      const decimals = decimalsOf.get(o.symbol) ?? 2;
      const newPx = el('input', { type: 'number', step: '0.01', style: 'width:80px', 'data-testid': 'move-px', 'data-order': String(o.id) });
      const resting = o.px_resting !== undefined && o.px_resting !== null ? String(o.px_resting / 10 ** decimals) : '';
      newPx.value = movePxDrafts.get(o.id) ?? resting;
      newPx.oninput = () => movePxDrafts.set(o.id, newPx.value);
      if (o.id === focused) refocus = newPx;
      const move = el('button', { 'data-testid': 'move', 'data-order': String(o.id) }, 'Move');
      move.onclick = () => {
        const px = newPx.value;
        movePxDrafts.delete(o.id);
        return act(() => api.move(o.id, cents(px, decimals)), `order ${o.id} moved`);
      };
      const cancel = el('button', { 'data-testid': 'cancel', 'data-order': String(o.id) }, 'Cancel');
      cancel.onclick = () => act(() => api.cancel(o.id), `order ${o.id} cancelled`);
      return el(
        'tr',
        { 'data-testid': 'open-order', 'data-order': String(o.id), 'data-px': String(o.px_resting ?? '') },
        el('td', {}, String(o.id)),
        el('td', {}, symbolName(o.symbol)),
        el('td', { class: o.side === 'buy' ? 'up' : 'down' }, o.side),
        el('td', {}, o.px_resting ? money(o.px_resting, decimals) : '—'),
        el('td', {}, String(o.qty_open)),
        el('td', {}, String(o.qty_filled)),
        el('td', {}, newPx, ' ', move, ' ', cancel),
      );
    }),
  );
  refocus?.focus();
}

// Positions in margin contracts, valued at their marks, and the margin they need per
// settlement asset: shown only when the exchange lists a margin symbol.
function renderPositions(report: AccountReport): void {
  $('margin-panel').hidden = multiplierOf.size === 0;
  if (multiplierOf.size === 0) return;
  const signed = (value: number, decimals: number) =>
    el('td', { class: value > 0 ? 'up' : value < 0 ? 'down' : '' }, `${value > 0 ? '+' : ''}${money(value, decimals)}`);
  const rows = report.positions.map((p) => {
    const decimals = decimalsOf.get(p.symbol) ?? 2;
    const multiplier = multiplierOf.get(p.symbol) ?? 1;
    const px = (value: number | null | undefined) => (value === null || value === undefined ? '—' : money(value, decimals));
    // A long is liquidated when the mark falls below its price, a short when the mark reaches it.
    const liquidation =
      p.liquidation_px === null || p.liquidation_px === undefined || p.liquidation_px <= 0
        ? '—'
        : `${p.size > 0 ? 'below' : 'at'} ${money(p.liquidation_px, decimals)}`;
    return el(
      'tr',
      { 'data-testid': 'position', 'data-symbol': p.symbol_name, 'data-size': String(p.size) },
      el('td', {}, p.symbol_name),
      el('td', { class: p.size > 0 ? 'up' : p.size < 0 ? 'down' : '' }, String(p.size)),
      el('td', {}, p.size === 0 ? '—' : money(p.cost / (p.size * multiplier), decimals)),
      el('td', {}, px(p.mark)),
      signed(p.unrealized, decimals),
      signed(p.realized, decimals),
      el('td', {}, `${money(p.initial_margin, decimals)} / ${money(p.maintenance_margin, decimals)}`),
      el('td', {}, liquidation),
    );
  });
  $('positions').replaceChildren(
    el('tr', {}, ...['contract', 'size', 'avg price', 'mark', 'unrealised P&L', 'realised P&L', 'margin init / maint', 'liquidation'].map((h) => el('th', {}, h))),
    ...(rows.length > 0 ? rows : [el('tr', {}, el('td', { class: 'muted', colspan: '8' }, 'no positions yet: buy or sell a margin contract'))]),
  );
  $('margin').replaceChildren(
    el('tr', {}, ...['settlement', 'cash', 'unrealised', 'equity', 'initial', 'maintenance', 'free margin'].map((h) => el('th', {}, h))),
    ...report.margin.map((m) => {
      const decimals = assetDecimals.get(m.asset) ?? 0;
      return el(
        'tr',
        { 'data-testid': 'margin', 'data-asset': m.asset_name, 'data-equity': String(m.equity) },
        el('td', {}, m.asset_name),
        el('td', {}, money(m.cash, decimals)),
        signed(m.unrealized, decimals),
        el('td', {}, money(m.equity, decimals)),
        el('td', {}, money(m.initial_margin, decimals)),
        el('td', {}, money(m.maintenance_margin, decimals)),
        el('td', { class: m.free_margin < 0 ? 'down' : '' }, money(m.free_margin, decimals)),
      );
    }),
  );
}

function renderEvents(): void {
  $('fills').replaceChildren(
    el('tr', {}, el('th', {}, 'event'), el('th', {}, 'order'), el('th', {}, 'symbol'), el('th', {}, 'side'), el('th', {}, 'price'), el('th', {}, 'qty')),
    ...events.slice(-30).reverse().map((e) => {
      const decimals = decimalsOf.get(e.symbol) ?? 2;
      const px = e.event === 'fill' ? money(e.px, decimals) : '';
      const qty = e.event === 'fill' ? e.qty : e.event === 'accepted' ? e.qty : e.qty_cancelled;
      const side = e.event === 'cancelled' ? '' : e.side;
      return el(
        'tr',
        { 'data-testid': `event-${e.event}`, 'data-order': String(e.order) },
        el('td', {}, e.event === 'cancelled' ? `cancelled (${e.reason})` : e.event),
        el('td', {}, String(e.order)),
        el('td', {}, symbolName(e.symbol)),
        el('td', {}, side),
        el('td', {}, px),
        el('td', {}, String(qty)),
      );
    }),
  );
}

// The account's statement from the history store: its latest balance movements.
async function refreshStatement(): Promise<void> {
  let statement;
  try {
    statement = await api.statement(account);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      $('statement').replaceChildren(el('tr', {}, el('td', { class: 'muted' }, 'this server has no history store')));
      return;
    }
    throw error;
  }
  $('statement').replaceChildren(
    el('tr', {}, el('th', {}, 'log index'), el('th', {}, 'asset'), el('th', {}, 'cause'), el('th', {}, 'order'), el('th', {}, 'available'), el('th', {}, 'reserved')),
    ...statement.movements.slice(-20).reverse().map((m) => {
      const decimals = assetDecimals.get(m.asset) ?? 0;
      const delta = (value: number) => `${value > 0 ? '+' : ''}${money(value, decimals)}`;
      return el(
        'tr',
        { 'data-testid': `statement-${m.cause}`, 'data-order': String(m.order_id ?? '') },
        el('td', {}, String(m.log_index)),
        el('td', {}, assetNames.get(m.asset) ?? String(m.asset)),
        el('td', {}, m.cause),
        el('td', {}, m.order_id === null || m.order_id === undefined ? '' : String(m.order_id)),
        el('td', {}, `${money(m.available, decimals)} (${delta(m.delta_available)})`),
        el('td', {}, `${money(m.reserved, decimals)} (${delta(m.delta_reserved)})`),
      );
    }),
  );
}

function renderQuote(): void {
  const id = Number($<HTMLSelectElement>('symbol').value);
  const quote = bbo.get(id);
  const decimals = decimalsOf.get(id) ?? 2;
  const show = (px?: number) => (px === undefined ? '—' : money(px, decimals));
  $('quote').textContent = `${symbolName(id)}  bid ${show(quote?.bid)}  ·  ask ${show(quote?.ask)}`;
}

async function act<T>(call: () => Promise<T>, done: string | ((result: T) => string)): Promise<void> {
  try {
    const result = await call();
    say(typeof done === 'string' ? done : done(result), true);
  } catch (error) {
    say(error instanceof ApiError ? `${error.name_}: ${error.message}` : String(error), false);
  }
  await refresh().catch(() => {});
}

async function place(event: SubmitEvent): Promise<void> {
  event.preventDefault();
  const id = Number($<HTMLSelectElement>('symbol').value);
  const decimals = decimalsOf.get(id) ?? 2;
  const side = $<HTMLSelectElement>('side').value as 'buy' | 'sell';
  const type = $<HTMLSelectElement>('type').value as 'limit' | 'market';
  const qty = Number($<HTMLInputElement>('qty').value);
  const order = { account, symbol: String(id), side, type, qty } as Parameters<typeof api.place>[0];
  if (type === 'limit') {
    order.px = cents($<HTMLInputElement>('px').value, decimals);
  } else if (side === 'buy' && !multiplierOf.has(id)) {
    // A market buy names the most it may spend: the ask plus 5 %, per share. (A margin
    // contract's market order holds its margin at the symbol's highest price instead.)
    const ask = bbo.get(id)?.ask;
    if (ask === undefined) return say('no offer to buy from right now', false);
    order.budget = Math.ceil(ask * 1.05) * qty;
  }
  await act(() => api.place(order), (accepted) => `order ${accepted.id} accepted (log index ${accepted.log_index})`);
}

async function main(): Promise<void> {
  const { key, accounts } = await apiKey();
  useKey(key);
  account = accounts[0] ?? 0;
  $('who').textContent = `account ${account}`;
  const [all, assets] = await Promise.all([api.symbols(), api.assets()]);
  symbols = all;
  for (const a of assets) {
    assetDecimals.set(a.id, a.decimals);
    assetNames.set(a.id, a.name);
  }
  for (const s of symbols) {
    decimalsOf.set(s.id, assetDecimals.get(s.quote) ?? 2);
    if (s.margin) multiplierOf.set(s.id, s.margin.multiplier);
  }
  $<HTMLSelectElement>('symbol').replaceChildren(
    ...symbols.map((s) => el('option', { value: String(s.id) }, s.margin ? `${s.name} (future ×${s.margin.multiplier})` : s.name)),
  );
  $<HTMLSelectElement>('symbol').onchange = () => {
    const quote = bbo.get(Number($<HTMLSelectElement>('symbol').value));
    const decimals = decimalsOf.get(Number($<HTMLSelectElement>('symbol').value)) ?? 2;
    if (quote?.bid) $<HTMLInputElement>('px').value = String(quote.bid / 10 ** decimals);
    renderQuote();
  };
  $<HTMLFormElement>('order-form').onsubmit = (event) => void place(event);
  new Feed(['bbo', 'orders'], [], (message) => {
    if (message.type === 'bbo') {
      bbo.set(message.symbol, { bid: message.bid_px ?? undefined, ask: message.ask_px ?? undefined });
      renderQuote();
    } else if (message.type === 'order') {
      const { type: _t, seq: _s, ...event } = message;
      events.push(event as WsOrderEvent);
      renderEvents();
      refresh().catch(() => {});
    }
  }, (state) => {
    $('feed-state').textContent = state === 'open' ? 'live' : 'reconnecting…';
  });
  renderEvents();
  await refresh();
  await refreshStatement().catch(() => {});
  setInterval(() => {
    refresh().catch(() => {});
    refreshStatement().catch(() => {});
  }, 3000);
}

main().catch((error) => say(`could not start: ${(error as Error).message}`, false));
