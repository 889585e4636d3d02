/**
 * Headless Chromium for the console tests: Debian's /usr/bin/chromium driven by playwright-core
 * (no browser download). Without it: `apt-get install -y chromium`.
 */
import { chromium, type Browser, type Page } from 'playwright-core';

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
}

/** What a page asked for, and every answer that was an error or never came. */
export interface NetworkLog {
  urls: string[];
  failures: string[];
}

export function watchNetwork(page: Page): NetworkLog {
  const log: NetworkLog = { urls: [], failures: [] };
  page.on('request', (r) => log.urls.push(r.url()));
  page.on('response', (r) => {
    if (r.status() >= 400) log.failures.push(`${r.status()} ${r.request().method()} ${r.url()}`);
  });
  page.on('requestfailed', (r) => log.failures.push(`failed ${r.method()} ${r.url()}: ${r.failure()?.errorText}`));
  return log;
}
