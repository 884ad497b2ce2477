// End-to-end check of the dashboard and the trading page in Debian's headless Chromium,
// driven by playwright-core: `node e2e/dashboard.mjs URL SCREENSHOT_DIR`. The Rust test
// crates/bourse/tests/demo.rs starts `bourse demo` and runs this against it. Prints one
// JSON object with what it saw as its last line; exits non-zero when a check fails.
import { launchChromium, step, until } from './lib.mjs';
import { join } from 'node:path';

const [url, shots] = process.argv.slice(2);
if (!url || !shots) {
  console.error('usage: node e2e/dashboard.mjs URL SCREENSHOT_DIR');
  process.exit(2);
}
const report = { url };
const browser = await launchChromium();
let failed;
// The demo serves HTTPS with a certificate from its own, new CA, which this fresh
// profile does not trust (the Rust tests verify such certificates against the CA).
const context = { ignoreHTTPSErrors: true };
try {
  const page = await browser.newPage({ ...context, viewport: { width: 1600, height: 1000 } });
  const errors = [];
  page.on('pageerror', (error) => errors.push(String(error)));
  await page.goto(url);

  step('trades appear');
  const tradeCount = () => page.$eval('#trade-count', (e) => Number(e.dataset.count));
  report.trades_first = await until('a trade on the dashboard', 60, async () => (await tradeCount()) > 0 && tradeCount());

  step('prices move');
  const prices = () =>
    page.$$eval('[data-testid=last-px]', (cells) => Object.fromEntries(cells.map((c) => [c.dataset.symbol, c.dataset.px])));
  const before = await prices();
  report.symbols = Object.keys(before).length;
  report.moved = await until('a last price to change', 60, async () => {
    const now = await prices();
    const moved = Object.keys(now).filter((s) => now[s] && before[s] && now[s] !== before[s]);
    return moved.length > 0 && moved;
  });
  const canvases = await page.$$eval('#chart-price canvas', (c) => c.length);
  if (canvases === 0) throw new Error('the price chart drew no canvas');

  step('statistics arrive');
  await until('portfolio values and latency', 30, () => page.$eval('#totals', (e) => e.textContent.includes('ack p50')));

  step('kill the leader');
  const leaderOf = () => page.$eval('#nodes', (e) => e.dataset.leader);
  const oldLeader = await until('a leader', 30, leaderOf);
  report.old_leader = Number(oldLeader);
  await page.click(`[data-testid=kill][data-node-id="${oldLeader}"]`);
  await until('the killed node shown down', 15, () =>
    page.$eval(`[data-testid=node][data-node-id="${oldLeader}"]`, (e) => e.dataset.role === 'down'),
  );
  // One node down at a time: a second kill now is refused (a majority must stay up).
  const other = [1, 2, 3].find((id) => String(id) !== oldLeader);
  report.second_kill = await page.evaluate(async (id) => {
    const response = await fetch(`/v1/cluster/nodes/${id}/kill`, { method: 'POST' });
    return { status: response.status, name: (await response.json()).error?.name };
  }, other);
  if (report.second_kill.name !== 'kill_refused') throw new Error(`a second kill answered ${JSON.stringify(report.second_kill)}`);
  const newLeader = await until('a new leader', 30, async () => {
    const leader = await leaderOf();
    return leader && leader !== oldLeader && leader;
  });
  report.new_leader = Number(newLeader);
  const afterFailover = await tradeCount();
  report.trades_after_failover = await until('trading to go on', 60, async () => {
    const count = await tradeCount();
    return count >= afterFailover + 10 && count - afterFailover;
  });
  await until('the killed node back', 60, () =>
    page.$eval(`[data-testid=node][data-node-id="${oldLeader}"]`, (e) => e.dataset.role !== 'down'),
  );
  await page.waitForTimeout(1500);
  await page.screenshot({ path: join(shots, 'dashboard.png') });

  step('trade from the trading page');
  const trade = await browser.newPage({ ...context, viewport: { width: 1400, height: 900 } });
  trade.on('pageerror', (error) => errors.push(String(error)));
  await trade.goto(new URL('trade.html', url).href);
  await until('balances', 30, () => trade.$$eval('#balances tr', (rows) => rows.length > 2));
  await trade.selectOption('#symbol', { index: 0 });
  await trade.selectOption('#side', 'buy');
  await trade.fill('#qty', '3');
  await trade.fill('#px', '1.00');
  await trade.click('#place');
  const resting = await until('the order in open orders', 30, () =>
    trade.$eval('[data-testid=open-order]', (row) => row.dataset.order).catch(() => undefined),
  );
  report.resting_order = Number(resting);
  await trade.fill(`[data-testid=move-px][data-order="${resting}"]`, '1.01');
  await trade.click(`[data-testid=move][data-order="${resting}"]`);
  await until('the order moved to 1.01', 30, () =>
    trade.$eval(`[data-testid=open-order][data-order="${resting}"]`, (row) => row.dataset.px === '101').catch(() => false),
  );
  await trade.click(`[data-testid=cancel][data-order="${resting}"]`);
  await until('the order gone', 30, async () => (await trade.$(`[data-testid=open-order][data-order="${resting}"]`)) === null);
  // A marketable buy: a limit far above the market trades at once.
  await trade.fill('#qty', '2');
  await trade.fill('#px', '1000.00');
  await trade.click('#place');
  await until('a fill event', 30, async () => (await trade.$('[data-testid=event-fill]')) !== null);
  report.filled = true;
  // The history sink follows the cluster; the statement (refreshed every 3 s) shows the
  // fill's balance movements.
  await until('the trade in the statement', 30, async () => (await trade.$('[data-testid=statement-trade]')) !== null);
  report.statement = true;
  // The margin contract: a marketable buy opens a position, shown with its margin.
  step('a position in the margin contract');
  const future = await trade.$$eval('#symbol option', (options) => options.find((o) => o.textContent.startsWith('FUT/'))?.value);
  if (!future) throw new Error('no margin contract among the symbols');
  await trade.selectOption('#symbol', future);
  await trade.fill('#qty', '1');
  await trade.fill('#px', '1000.00');
  await trade.click('#place');
  report.position = await until('the position in the positions table', 30, () =>
    trade
      .$eval('[data-testid=position][data-symbol^="FUT/"]', (row) => Number(row.dataset.size))
      .catch(() => undefined),
  );
  report.margin_equity = await until('the margin summary', 30, () =>
    trade.$eval('[data-testid=margin]', (row) => Number(row.dataset.equity)).catch(() => undefined),
  );
  await trade.screenshot({ path: join(shots, 'trade.png') });
  report.page_errors = errors;
  if (errors.length > 0) throw new Error(`errors on the pages: ${errors.join('; ')}`);
} catch (error) {
  failed = error;
  report.error = String(error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
if (failed) process.exit(1);
