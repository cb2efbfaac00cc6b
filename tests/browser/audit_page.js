// Drives mosaic's audit page in headless Chromium (playwright-core): marks verdicts, saves audit.json
// through the page's Blob download, and takes a screenshot.
//   node tests/browser/audit_page.js PAGE.html OUT_audit.json OUT_shot.png CHROMIUM [n_correct] [n_incorrect]
const { chromium } = require("playwright-core");
(async () => {
  const [page_path, out_json, out_png, exe, nc = "3", ni = "1"] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: exe, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
  });
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1100, height: 800 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", e => errors.push(String(e)));
  await page.goto("file://" + page_path);
  const cards = page.locator(".card");
  const n = await cards.count();
  let k = 0;
  for (; k < Math.min(n, +nc); k++) await cards.nth(k).locator(".b-correct").click();
  for (let j = 0; j < +ni && k < n; j++, k++) await cards.nth(k).locator(".b-incorrect").click();
  if (n > 0) await cards.nth(0).locator(".note").fill("looks fine");
  if (n > 0) await cards.nth(0).locator(".note").dispatchEvent("change");
  const progress = await page.locator("#progress").textContent();
  await page.screenshot({ path: out_png, fullPage: false });
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#save")]);
  await download.saveAs(out_json);
  // marks survive a reload (localStorage)
  await page.reload();
  const progress2 = await page.locator("#progress").textContent();
  console.log(JSON.stringify({ cards: n, progress, progress_after_reload: progress2, suggested: download.suggestedFilename(), errors }));
  await browser.close();
})().catch(e => { console.error(e); process.exit(1); });
