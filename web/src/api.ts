// The REST + WebSocket API, typed from the OpenAPI document (src/schema.d.ts is
// generated from openapi.json by `npm run gen`). Nothing here knows about pages.
import type { components } from './schema';

export type Schemas = components['schemas'];
export type Symbol = Schemas['Symbol'];
export type Asset = Schemas['Asset'];
export type Trade = Schemas['Trade'];
export type Level = Schemas['Level'];
export type Order = Schemas['Order'];
export type Balances = Schemas['Balances'];
export type AccountReport = Schemas['AccountReport'];
export type Position = Schemas['Position'];
export type MarginSummary = Schemas['MarginSummary'];
export type ClusterView = Schemas['ClusterView'];
export type NodeView = Schemas['NodeView'];
export type DemoStats = Schemas['DemoStats'];
export type StatsPoint = Schemas['StatsPoint'];
export type DemoGuest = Schemas['DemoGuest'];
export type PlaceOrder = Schemas['PlaceOrder'];
export type Accepted = Schemas['Accepted'];
export type WsMessage = Schemas['WsMessage'] & { seq: number };
export type WsOrderEvent = Schemas['WsOrderEvent'];

/** An error the API answered with. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: number,
    readonly name_: string,
    message: string,
  ) {
    super(message);
  }
}

/** The key this page uses: `?key=` in the address, else the demo's guest key. */
export async function apiKey(): Promise<{ key: string; accounts: number[] }> {
  const fromUrl = new URLSearchParams(location.search).get('key');
  if (fromUrl) {
    const accounts = (new URLSearchParams(location.search).get('accounts') ?? '')
      .split(',')
      .filter((a) => a !== '')
      .map(Number);
    return { key: fromUrl, accounts };
  }
  const guest = await request<DemoGuest>('GET', '/v1/demo/guest');
  return { key: guest.api_key, accounts: guest.accounts };
}

let key: string | undefined;

export function useKey(k: string): void {
  key = k;
}

export async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  if (key) headers['authorization'] = `Bearer ${key}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  const value = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const error = value?.error ?? { code: 0, name: 'http', message: `${response.status}` };
    throw new ApiError(response.status, error.code, error.name, error.message);
  }
  return value as T;
}

export const api = {
  symbols: () => request<Symbol[]>('GET', '/v1/symbols'),
  assets: () => request<Asset[]>('GET', '/v1/assets'),
  trades: (symbol: number, limit = 500) => request<Schemas['Trades']>('GET', `/v1/trades/${symbol}?limit=${limit}`),
  book: (symbol: number, levels = 15) => request<Schemas['Book']>('GET', `/v1/books/${symbol}?levels=${levels}`),
  cluster: () => request<ClusterView>('GET', '/v1/cluster'),
  kill: (id: number) => request<Schemas['Killed']>('POST', `/v1/cluster/nodes/${id}/kill`),
  stats: (since: number) => request<DemoStats>('GET', `/v1/demo/stats?since=${since}`),
  balances: (account: number) => request<Balances>('GET', `/v1/accounts/${account}/balances`),
  openOrders: (account: number) => request<Schemas['Orders']>('GET', `/v1/accounts/${account}/orders`),
  // Balances, margin positions at their marks, margin per settlement asset, open orders.
  report: (account: number) => request<AccountReport>('GET', `/v1/accounts/${account}/report`),
  place: (order: PlaceOrder) => request<Accepted>('POST', '/v1/orders', order),
  cancel: (order: number) => request<Accepted>('DELETE', `/v1/orders/${order}`),
  move: (order: number, px: number) => request<Accepted>('POST', `/v1/orders/${order}/move`, { px }),
  // From the history store (404 when the server has none).
  statement: (account: number, limit = 1000) =>
    request<Schemas['Statement']>('GET', `/v1/accounts/${account}/statement?limit=${limit}`),
};

/**
 * A WebSocket subscription that checks every message's `seq` (and each book's
 * `symbol_seq`, by the caller) and subscribes again after a gap or a disconnect, which
 * starts over with fresh L2 snapshots.
 */
export class Feed {
  private socket?: WebSocket;
  private seq = 0;
  private closed = false;

  constructor(
    private readonly channels: Schemas['Channel'][],
    private readonly symbols: string[],
    private readonly onMessage: (message: WsMessage) => void,
    private readonly onState: (state: 'open' | 'reconnecting') => void = () => {},
  ) {
    this.connect();
  }

  private connect(): void {
    if (this.closed) return;
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const socket = new WebSocket(`${scheme}://${location.host}/v1/ws?api_key=${encodeURIComponent(key ?? '')}`);
    this.socket = socket;
    this.seq = 0;
    socket.onopen = () => {
      socket.send(JSON.stringify({ op: 'subscribe', channels: this.channels, symbols: this.symbols }));
      this.onState('open');
    };
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data as string) as WsMessage;
      if (message.seq !== this.seq + 1) {
        this.resync();
        return;
      }
      this.seq = message.seq;
      this.onMessage(message);
    };
    socket.onclose = () => {
      if (this.socket !== socket || this.closed) return;
      this.onState('reconnecting');
      setTimeout(() => this.connect(), 500);
    };
  }

  /** Starts over: a new subscription sends new snapshots. */
  resync(): void {
    const socket = this.socket;
    this.socket = undefined;
    socket?.close();
    this.onState('reconnecting');
    setTimeout(() => this.connect(), 100);
  }

  close(): void {
    this.closed = true;
    this.socket?.close();
  }
}

/** A symbol's book from an L2 snapshot and updates. */
export class Book {
  bids = new Map<number, number>();
  asks = new Map<number, number>();
  seq = 0;

  snapshot(bids: Level[], asks: Level[], seq: number): void {
    this.bids = new Map(bids.map((l) => [l.px, l.qty]));
    this.asks = new Map(asks.map((l) => [l.px, l.qty]));
    this.seq = seq;
  }

  /** Applies one update; false when it does not follow the last one (a gap). */
  update(side: Schemas['Side'], px: number, qty: number, seq: number): boolean {
    if (seq !== this.seq + 1) return false;
    this.seq = seq;
    const levels = side === 'buy' ? this.bids : this.asks;
    if (qty === 0) levels.delete(px);
    else levels.set(px, qty);
    return true;
  }

  /** Best first. */
  levels(side: Schemas['Side'], count: number): Level[] {
    const levels = side === 'buy' ? this.bids : this.asks;
    const sorted = [...levels.entries()].sort((a, b) => (side === 'buy' ? b[0] - a[0] : a[0] - b[0]));
    return sorted.slice(0, count).map(([px, qty]) => ({ px, qty }));
  }
}

/** Formats minor units with `decimals` decimals. */
export function money(value: number, decimals = 2): string {
  return (value / 10 ** decimals).toLocaleString('en-US', {
    minimumFractionDigits: decimals,
    maximumFractionDigits: decimals,
  });
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  node.append(...children);
  return node;
}
