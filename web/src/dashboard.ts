// The dashboard: every symbol's book, price chart and trades from the WebSocket; the
// traders' portfolio values, fairness, sequencer and latency figures from
// /v1/demo/stats; the cluster from /v1/cluster, with a button to kill a node.
import {
  CandlestickSeries,
  ColorType,
  createChart,
  HistogramSeries,
  LineSeries,
  type IChartApi,
  type ISeriesApi,
  type UTCTimestamp,
} from 'lightweight-charts';
import { api, ApiError, apiKey, Book, el, Feed, money, useKey, type NodeView, type StatsPoint, type Symbol, type Trade } from './api';
import './style.css';

const CANDLE_SECONDS = 5;
const KIND_COLORS: Record<string, string> = {
  market_maker: '#f5a623',
  noise: '#4a90d9',
  mean_reversion: '#7ed321',
  momentum: '#d0021b',
  pairs: '#bd10e0',
  value: '#50e3c2',
};

interface Candle {
  time: UTCTimestamp;
  open: number;
  high: number;
  low: number;
  close: number;
  volume: number;
}

interface Market {
  symbol: Symbol;
  decimals: number;
  book: Book;
  candles: Candle[];
  first?: number;
  last?: number;
}

const markets = new Map<number, Market>();
let selected = 0;
let tradesSeen = 0;
const tape: Trade[] = [];

function chartOptions(height: number) {
  return {
    height,
    layout: { background: { type: ColorType.Solid, color: '#11161d' }, textColor: '#9aa7b4', fontSize: 11 },
    grid: { vertLines: { color: '#1c232c' }, horzLines: { color: '#1c232c' } },
    timeScale: { timeVisible: true, secondsVisible: true, borderColor: '#2a323c' },
    rightPriceScale: { borderColor: '#2a323c' },
    autoSize: true,
  };
}

// ---------------------------------------------------------------------------------------
// Prices: candles from trades
// ---------------------------------------------------------------------------------------

let priceChart: IChartApi;
let candleSeries: ISeriesApi<'Candlestick'>;
let volumeSeries: ISeriesApi<'Histogram'>;

function addTrade(market: Market, trade: Trade): Candle | undefined {
  const px = trade.px / 10 ** market.decimals;
  const time = (Math.floor(trade.ts / 1e9 / CANDLE_SECONDS) * CANDLE_SECONDS) as UTCTimestamp;
  market.first ??= trade.px;
  market.last = trade.px;
  const candles = market.candles;
  const current = candles[candles.length - 1];
  if (current && current.time === time) {
    current.high = Math.max(current.high, px);
    current.low = Math.min(current.low, px);
    current.close = px;
    current.volume += trade.qty;
    return current;
  }
  if (current && current.time > time) return undefined; // out of order (a resubscription): skip
  const candle = { time, open: px, high: px, low: px, close: px, volume: trade.qty };
  candles.push(candle);
  if (candles.length > 2_000) candles.shift();
  return candle;
}

function showSelected(): void {
  const market = markets.get(selected);
  if (!market) return;
  candleSeries.setData(market.candles.map(({ volume: _, ...c }) => c));
  volumeSeries.setData(market.candles.map((c) => ({ time: c.time, value: c.volume, color: c.close >= c.open ? '#26a69a55' : '#ef535055' })));
  priceChart.timeScale().scrollToRealTime();
  document.getElementById('chart-title')!.textContent = `${market.symbol.name} — ${CANDLE_SECONDS}-second candles`;
  renderTicker();
  renderBook();
}

// ---------------------------------------------------------------------------------------
// Ticker, book, tape
// ---------------------------------------------------------------------------------------

function renderTicker(): void {
  const ticker = document.getElementById('ticker')!;
  ticker.replaceChildren(
    ...[...markets.values()].map((m) => {
      const change = m.first && m.last ? ((m.last - m.first) / m.first) * 100 : 0;
      const button = el(
        'button',
        {
          class: `tick ${m.symbol.id === selected ? 'selected' : ''}`,
          'data-testid': 'symbol',
          'data-symbol': m.symbol.name,
        },
        el('span', { class: 'name' }, m.symbol.name.split('/')[0]),
        el('span', { class: 'px', 'data-testid': 'last-px', 'data-symbol': m.symbol.name, 'data-px': String(m.last ?? '') }, m.last ? money(m.last, m.decimals) : '—'),
        el('span', { class: change >= 0 ? 'up' : 'down' }, `${change >= 0 ? '+' : ''}${change.toFixed(2)}%`),
      );
      button.onclick = () => {
        selected = m.symbol.id;
        showSelected();
      };
      return button;
    }),
  );
}

function renderBook(): void {
  const market = markets.get(selected);
  const container = document.getElementById('book')!;
  if (!market) return;
  const asks = market.book.levels('sell', 12).reverse();
  const bids = market.book.levels('buy', 12);
  const most = Math.max(1, ...asks.map((l) => l.qty), ...bids.map((l) => l.qty));
  const row = (side: string, px: number, qty: number) =>
    el(
      'div',
      { class: `level ${side}` },
      el('span', { class: 'bar', style: `width:${(100 * qty) / most}%` }),
      el('span', { class: 'px' }, money(px, market.decimals)),
      el('span', { class: 'qty' }, qty.toLocaleString('en-US')),
    );
  const spread =
    asks.length && bids.length ? money(asks[asks.length - 1].px - bids[0].px, market.decimals) : '—';
  container.replaceChildren(
    ...asks.map((l) => row('ask', l.px, l.qty)),
    el('div', { class: 'spread' }, `spread ${spread}`),
    ...bids.map((l) => row('bid', l.px, l.qty)),
  );
}

function renderTape(): void {
  const container = document.getElementById('tape')!;
  container.replaceChildren(
    ...tape.slice(-40).reverse().map((t) => {
      const market = markets.get(t.symbol);
      const time = new Date(t.ts / 1e6).toLocaleTimeString('en-GB');
      return el(
        'div',
        { class: `print ${t.taker_side === 'buy' ? 'up' : 'down'}` },
        el('span', {}, time),
        el('span', {}, market?.symbol.name.split('/')[0] ?? String(t.symbol)),
        el('span', { class: 'px' }, money(t.px, market?.decimals ?? 2)),
        el('span', { class: 'qty' }, String(t.qty)),
      );
    }),
  );
  const count = document.getElementById('trade-count')!;
  count.textContent = tradesSeen.toLocaleString('en-US');
  count.dataset.count = String(tradesSeen);
}

// ---------------------------------------------------------------------------------------
// Market data
// ---------------------------------------------------------------------------------------

function onTrade(trade: Trade): void {
  const market = markets.get(trade.symbol);
  if (!market) return;
  tradesSeen += 1;
  tape.push(trade);
  if (tape.length > 200) tape.shift();
  const candle = addTrade(market, trade);
  if (candle && trade.symbol === selected) {
    const { volume, ...ohlc } = candle;
    candleSeries.update(ohlc);
    volumeSeries.update({ time: candle.time, value: volume, color: candle.close >= candle.open ? '#26a69a55' : '#ef535055' });
  }
}

function startFeed(): void {
  let dirty = false;
  const feed: Feed = new Feed(['l2', 'trades'], [], (message) => {
    switch (message.type) {
      case 'l2_snapshot':
        markets.get(message.symbol)?.book.snapshot(message.bids, message.asks, message.symbol_seq);
        break;
      case 'l2_update': {
        const book = markets.get(message.symbol)?.book;
        if (book && !book.update(message.side, message.px, message.qty, message.symbol_seq)) feed.resync();
        break;
      }
      case 'trade':
        onTrade(message);
        break;
      case 'error':
        console.warn('feed:', message.name, message.message);
        break;
    }
    dirty = true;
  }, (state) => {
    document.getElementById('feed-state')!.textContent = state === 'open' ? 'live' : 'reconnecting…';
  });
  // Repaint at most five times a second, however fast the market.
  setInterval(() => {
    if (!dirty) return;
    dirty = false;
    renderBook();
    renderTape();
    renderTicker();
  }, 200);
}

// ---------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------

let leaderSeen: number | undefined;

function log(text: string): void {
  const events = document.getElementById('events')!;
  events.prepend(el('div', {}, `${new Date().toLocaleTimeString('en-GB')}  ${text}`));
  while (events.childElementCount > 30) events.lastElementChild?.remove();
}

function renderCluster(nodes: NodeView[]): void {
  const anyDown = nodes.some((n) => !n.up);
  const leader = nodes.find((n) => n.up && n.role === 'leader');
  if (leader && leader.id !== leaderSeen) {
    log(`node ${leader.id} leads (term ${leader.term})`);
    leaderSeen = leader.id;
  }
  const panel = document.getElementById('nodes')!;
  panel.dataset.leader = leader ? String(leader.id) : '';
  panel.replaceChildren(
    ...nodes.map((n) => {
      const kill = el('button', { class: 'kill', 'data-testid': 'kill', 'data-node-id': String(n.id) }, 'Kill');
      kill.disabled = !n.up || anyDown;
      kill.title = anyDown ? 'one node at a time: wait until it is back' : `SIGKILL node ${n.id}`;
      kill.onclick = async () => {
        kill.disabled = true;
        try {
          await api.kill(n.id);
          log(`node ${n.id} killed (SIGKILL)${n.role === 'leader' ? ': the leader — watch the failover' : ''}`);
        } catch (error) {
          log(`kill refused: ${(error as Error).message}`);
        }
      };
      return el(
        'div',
        { class: `node ${n.up ? n.role : 'down'}`, 'data-testid': 'node', 'data-node-id': String(n.id), 'data-role': n.up ? n.role : 'down' },
        el('div', { class: 'node-head' }, el('b', {}, `node ${n.id}`), el('span', { class: 'role' }, n.up ? n.role : 'down')),
        el('div', {}, `term ${n.term} · applied ${n.applied_index.toLocaleString('en-US')}`),
        el('div', { class: 'hash' }, n.up ? `pid ${n.pid} · hash ${n.state_hash.slice(0, 10)}…` : 'restarting soon'),
        kill,
      );
    }),
  );
}

async function pollCluster(): Promise<void> {
  try {
    renderCluster((await api.cluster()).nodes);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      // A gateway without the demo's controls: no cluster to show.
      document.getElementById('nodes')!.textContent = 'this server shows no cluster (bourse demo does)';
      return;
    }
  }
  setTimeout(pollCluster, 700);
}

// ---------------------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------------------

interface StatCharts {
  values: ISeriesApi<'Line'>[];
  inbound: ISeriesApi<'Line'>;
  inboundStrict: ISeriesApi<'Line'>;
  outbound: ISeriesApi<'Line'>;
  held: ISeriesApi<'Line'>;
  heldMean: ISeriesApi<'Line'>;
  p50: ISeriesApi<'Line'>;
  p90: ISeriesApi<'Line'>;
  p99: ISeriesApi<'Line'>;
  hold: ISeriesApi<'Line'>;
}

function smallChart(id: string): IChartApi {
  return createChart(document.getElementById(id)!, chartOptions(170));
}

function line(chart: IChartApi, color: string, title: string, width: 1 | 2 = 2): ISeriesApi<'Line'> {
  return chart.addSeries(LineSeries, { color, lineWidth: width, title, priceLineVisible: false, lastValueVisible: title !== '' });
}

async function startStats(): Promise<void> {
  let stats;
  try {
    stats = await api.stats(0);
  } catch {
    document.getElementById('stats-note')!.textContent = 'no demo statistics on this server';
    return;
  }
  document.getElementById('scenario')!.textContent =
    `${stats.scenario} population · ${stats.traders.length} traders over ${stats.gateways.length} gateways (${stats.gateways[0]?.profile ?? ''} delays)`;
  const kinds = [...new Set(stats.traders.map((t) => t.kind))];
  document.getElementById('legend')!.replaceChildren(
    ...kinds.map((k) => el('span', { style: `color:${KIND_COLORS[k] ?? '#ccc'}` }, `■ ${k.replace('_', ' ')}`)),
  );
  const values = smallChart('chart-values');
  values.applyOptions({ localization: { priceFormatter: (v: number) => `${v < 0 ? '−' : '+'}$${Math.abs(v).toLocaleString('en-US', { maximumFractionDigits: 0 })}` } });
  const fairness = smallChart('chart-fairness');
  const sequencer = smallChart('chart-sequencer');
  const latency = smallChart('chart-latency');
  const charts: StatCharts = {
    values: stats.traders.map((t) => line(values, KIND_COLORS[t.kind] ?? '#ccc', '', 1)),
    inbound: line(fairness, '#4a90d9', 'inbound %'),
    inboundStrict: line(fairness, '#9013fe', 'inbound strict %', 1),
    outbound: line(fairness, '#f5a623', 'outbound %'),
    held: line(sequencer, '#7ed321', 'held now', 1),
    heldMean: line(sequencer, '#50e3c2', 'mean held'),
    p50: line(latency, '#4a90d9', 'p50 ms'),
    p90: line(latency, '#f5a623', 'p90 ms', 1),
    p99: line(latency, '#d0021b', 'p99 ms'),
    // The market data hold d_h (adaptive unless the demo runs with --fixed-hold).
    hold: line(latency, '#bd10e0', 'md hold ms', 1),
  };
  let since = 0;
  const add = (points: StatsPoint[]) => {
    for (const p of points) {
      const time = Math.floor(p.ts_ms / 1000) as UTCTimestamp;
      // Each trader's value against the starting portfolio at today's prices, in
      // dollars: what its trading earned (48 lines around $16M, moving with the prices,
      // would sit on top of each other).
      p.values.forEach((v, i) => charts.values[i]?.update({ time, value: (v - p.value_hold) / 100 }));
      charts.inbound.update({ time, value: p.inbound_unfairness_pct });
      charts.inboundStrict.update({ time, value: p.inbound_unfairness_strict_pct });
      charts.outbound.update({ time, value: p.outbound_unfairness_pct });
      charts.held.update({ time, value: p.sequencer_held });
      charts.heldMean.update({ time, value: p.sequencer_held_mean });
      charts.p50.update({ time, value: p.latency_us_p50 / 1000 });
      charts.p90.update({ time, value: p.latency_us_p90 / 1000 });
      charts.p99.update({ time, value: p.latency_us_p99 / 1000 });
      if (p.market_data_hold_us_mean) charts.hold.update({ time, value: p.market_data_hold_us_mean / 1000 });
      since = p.seq;
      const totals = document.getElementById('totals')!;
      totals.textContent = `${p.orders} orders/s · ${p.trades} trades/s · ack p50 ${(p.latency_us_p50 / 1000).toFixed(1)} ms`;
    }
  };
  // The figures since the demo started stay in view, however long it runs.
  const fit = () => [values, fairness, sequencer, latency].forEach((chart) => chart.timeScale().fitContent());
  add(stats.points);
  fit();
  const poll = async () => {
    try {
      const next = await api.stats(since);
      add(next.points);
      fit();
      document.getElementById('orders-total')!.textContent = next.totals.orders.toLocaleString('en-US');
    } catch {
      /* the next poll tries again */
    }
    setTimeout(poll, 1000);
  };
  poll();
}

// ---------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const { key } = await apiKey();
  useKey(key);
  const [symbols, assets] = await Promise.all([api.symbols(), api.assets()]);
  for (const symbol of symbols) {
    const decimals = assets.find((a) => a.id === symbol.quote)?.decimals ?? 2;
    markets.set(symbol.id, { symbol, decimals, book: new Book(), candles: [] });
  }
  selected = symbols[0]?.id ?? 0;
  priceChart = createChart(document.getElementById('chart-price')!, chartOptions(340));
  priceChart.timeScale().applyOptions({ barSpacing: 12, rightOffset: 3 });
  candleSeries = priceChart.addSeries(CandlestickSeries, {
    upColor: '#26a69a',
    downColor: '#ef5350',
    wickUpColor: '#26a69a',
    wickDownColor: '#ef5350',
    borderVisible: false,
  });
  volumeSeries = priceChart.addSeries(HistogramSeries, { priceScaleId: '', priceFormat: { type: 'volume' } });
  volumeSeries.priceScale().applyOptions({ scaleMargins: { top: 0.8, bottom: 0 } });
  await Promise.all(
    symbols.map(async (symbol) => {
      const market = markets.get(symbol.id)!;
      for (const trade of (await api.trades(symbol.id, 2000)).trades) addTrade(market, trade);
    }),
  );
  showSelected();
  startFeed();
  pollCluster();
  startStats();
}

main().catch((error) => {
  document.getElementById('stats-note')!.textContent = `could not start: ${(error as Error).message}`;
});
