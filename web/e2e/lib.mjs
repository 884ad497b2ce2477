// What the end-to-end scripts share: progress lines, polling, and launching Debian's
// headless Chromium through playwright-core (browser downloads are blocked here).
import { chromium } from 'playwright-core';

/** A progress line on stderr (stdout's last line is the script's JSON report). */
export const step = (text) => console.error(`e2e: ${text}`);

/** Polls `probe` every `everyMs` until it returns a truthy value, or fails after `seconds`. */
export async function until(what, seconds, probe, everyMs = 250) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${seconds} s waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** Debian's Chromium (or $BOURSE_CHROMIUM), headless, quiet, in a new empty profile. */
export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.BOURSE_CHROMIUM ?? '/usr/bin/chromium',
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    // Playwright gives every launch a new, empty profile directory of its own.
  });
}
