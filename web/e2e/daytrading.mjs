// End-to-end check of the day-trading page in Debian's headless Chromium, driven by
// playwright-core: `node e2e/daytrading.mjs URL SCREENSHOT USERID [KEY]`. The Rust test
// crates/bourse/tests/daytrading_web.rs starts `bourse serve` and `bourse gateway run
// --http … --day-trading …` and runs this against them. It sees only the login form
// before login and the trading panels after it, logs in, adds funds, gets a
// quote, buys and commits (watching the 60-second countdown), sets a buy trigger that
// fires and sees the summary change, and saves a screenshot. Prints one JSON object
// with what it saw as its last line; exits non-zero when a check fails.
import { launchChromium, step, until } from './lib.mjs';

const [url, screenshot, userid, key = ''] = process.argv.slice(2);
if (!url || !screenshot || !userid) {
  console.error('usage: node e2e/daytrading.mjs URL SCREENSHOT USERID [KEY]');
  process.exit(2);
}
const report = { url, userid };
const browser = await launchChromium();
let failed;
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on('pageerror', (error) => errors.push(String(error)));
  await page.goto(new URL('daytrading.html', url).href);
  const message = () => page.$eval('#message', (e) => ({ kind: e.dataset.kind, text: e.textContent }));
  /** Clicks `selector` and waits for the page's message to say how it went. */
  async function act(selector, expect) {
    await page.$eval('#message', (e) => {
      e.textContent = '';
      e.dataset.kind = '';
    });
    await page.click(selector);
    const said = await until(`an answer to ${selector}`, 30, async () => {
      const m = await message();
      return m.kind && m;
    });
    if (said.kind !== expect) throw new Error(`${selector}: expected ${expect}, got ${said.kind}: ${said.text}`);
    return said.text;
  }
  const cash = () => page.$eval('#cash-available', (e) => e.textContent);
  const holding = (symbol) =>
    page
      .$eval(`[data-testid=holding][data-symbol="${symbol}"]`, (e) => Number(e.dataset.available))
      .catch(() => 0);
  /** Whether the trading panels and the login form take space on the page (Playwright's
   * visibility: a non-empty box, not `visibility: hidden`). */
  const shown = async () => ({
    app: await page.isVisible('#app'),
    add_form: await page.isVisible('#add-form'),
    login: await page.isVisible('#login-panel'),
  });

  step('before login only the login form shows');
  report.before_login = await shown();
  if (report.before_login.app || report.before_login.add_form || !report.before_login.login) {
    throw new Error(`before login: ${JSON.stringify(report.before_login)}`);
  }

  step('a wrong key is refused plainly');
  await page.fill('#userid', userid);
  await page.fill('#key', 'bk_wrong');
  await page.click('#login');
  report.wrong_key = await until('an error for the wrong key', 30, async () => {
    const m = await message();
    return m.kind === 'error' && m.text;
  });
  await Promise.all([page.waitForNavigation(), page.click('#logout')]);

  step('log in');
  await page.fill('#userid', userid);
  await page.fill('#key', key);
  await page.click('#login');
  await until('the page for the user', 30, () => page.$eval('#who', (e) => e.dataset.user));
  report.after_login = await shown();
  if (!report.after_login.app || !report.after_login.add_form || report.after_login.login) {
    throw new Error(`after login: ${JSON.stringify(report.after_login)}`);
  }

  step('add funds');
  await page.fill('#add-amount', '5000.00');
  report.added = await act('#add', 'ok');
  await until('cash in the summary', 30, async () => (await cash()) === '$5000.00');

  step('an error is shown plainly');
  await page.fill('#add-amount', '-3');
  report.invalid = await act('#add', 'error');
  if (!report.invalid.includes('invalid amount')) throw new Error(`not the spec's text: ${report.invalid}`);

  step('quote');
  await page.fill('#quote-symbol', 'ABC');
  await act('#quote', 'ok');
  report.price = await until('the price shown', 10, () => page.$eval('#quote-result', (e) => e.dataset.price));
  const cents = Math.round(Number(report.price) * 100);

  step('buy, watch the countdown, commit');
  await page.fill('#trade-symbol', 'ABC');
  await page.fill('#trade-amount', ((cents * 2 + 1) / 100).toFixed(2));
  await act('#buy', 'ok');
  const left = await until('a countdown', 10, () =>
    page.$eval('#buy-countdown', (e) => Number(e.dataset.left)).catch(() => 0),
  );
  if (left < 50 || left > 60) throw new Error(`the countdown shows ${left} s`);
  report.countdown_first = left;
  await until('the countdown to tick', 5, async () => (await page.$eval('#buy-countdown', (e) => Number(e.dataset.left))) < left);
  await act('#commit-buy', 'ok');
  report.bought = await until('2 shares held', 30, async () => (await holding('ABC')) === 2 && 2);
  if (await page.$('[data-testid=pending-buy]')) throw new Error('the committed buy is still shown pending');

  step('a buy trigger that fires');
  await page.selectOption('#trigger-side', 'buy');
  await page.fill('#trigger-symbol', 'ABC');
  await page.fill('#trigger-amount', ((cents * 3 + 1) / 100).toFixed(2));
  await act('#set-amount', 'ok');
  await until('the trigger listed, not armed', 30, () =>
    page.$eval('[data-testid=trigger][data-side=buy][data-symbol=ABC]', (e) => e.dataset.armed === 'false').catch(() => false),
  );
  await page.screenshot({ path: screenshot.replace(/\.png$/, '-trigger.png') });
  // At or above the cached quote: it fires at once (spec 5).
  await page.fill('#trigger-price', ((cents + 100) / 100).toFixed(2));
  await act('#set-price', 'ok');
  report.after_trigger = await until('3 more shares held', 30, async () => (await holding('ABC')) === 5 && 5);
  await until('the trigger gone', 10, async () => (await page.$('[data-testid=trigger]')) === null);
  report.cash_after = await cash();

  step('a sell trigger that stays armed, then a pending sell');
  await page.selectOption('#trigger-side', 'sell');
  await page.fill('#trigger-amount', '900.00');
  await act('#set-amount', 'ok');
  await page.fill('#trigger-price', '600.00');
  await act('#set-price', 'ok');
  await until('the sell trigger armed', 30, () =>
    page.$eval('[data-testid=trigger][data-side=sell]', (e) => e.dataset.armed === 'true').catch(() => false),
  );
  await page.fill('#trade-amount', (cents / 100).toFixed(2));
  await act('#sell', 'ok');
  await until('a pending sell', 10, async () => (await page.$('[data-testid=pending-sell]')) !== null);
  report.history_rows = await page.$$eval('#history tr', (rows) => rows.length - 1);
  await page.waitForTimeout(1200);
  await page.screenshot({ path: screenshot });
  report.page_errors = errors;
  if (errors.length > 0) throw new Error(`errors on the page: ${errors.join('; ')}`);
} catch (error) {
  failed = error;
  report.error = String(error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
if (failed) process.exit(1);
