// The chat page (GET /, examples/server/index.html) in a real browser: Debian's
// chromium, headless, driven by puppeteer-core (tests/server/run.sh starts the
// server). Types a message, presses Enter, and checks that the answer is shown
// growing, chunk by chunk, as it streams (versions of the text shorter than the
// final one, each a prefix of it) and then completes.
import puppeteer from 'puppeteer-core';

const [executablePath, url] = process.argv.slice(2);
const browser = await puppeteer.launch({ executablePath, headless: true,
                                         args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
let ok = false;
try {
  const page = await browser.newPage();
  await page.goto(url + '/', { waitUntil: 'load' });
  // Every text the answer shows, in order: the page replaces the answer's text node
  // on each streamed chunk, so each mutation record holds one version of the text.
  await page.evaluate(() => {
    window.versions = [];
    new MutationObserver((records) => {
      for (const r of records)
        if (r.target.classList && r.target.classList.contains('assistant'))
          for (const n of r.addedNodes) if (n.nodeType === Node.TEXT_NODE) window.versions.push(n.data);
    }).observe(document.getElementById('log'), { childList: true, subtree: true });
  });
  await page.$eval('#max', (e) => { e.value = '200'; });
  await page.type('#msg', 'Tell me a story about a cat.');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.assistant[data-done="1"]', { timeout: 60000 });
  const texts = await page.evaluate(() => window.versions);
  const final = await page.$eval('.assistant', (e) => e.textContent);
  const seen = texts.map((text) => ({ text, done: false }));
  seen.push({ text: final, done: true });
  const last = seen[seen.length - 1];
  const user = await page.$eval('.user', (e) => e.textContent);
  const partial = seen.filter((s) => !s.done && s.text.length > 0 && s.text.length < last.text.length &&
                                     last.text.startsWith(s.text)).length;
  console.log(`user message shown: ${JSON.stringify(user)}; answer of ${last.text.length} characters seen in ` +
              `${seen.length} states, ${partial} of them partial`);
  ok = user === 'Tell me a story about a cat.' && last.done && last.text.length > 0 && partial > 0;
} finally {
  await browser.close();
}
console.log(ok ? 'browser test passed' : 'FAIL: browser test');
process.exit(ok ? 0 : 1);
