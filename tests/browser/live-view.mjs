// The live view's browser test: a real headless chromium (Debian's), driven by Playwright,
// against `leasehold dashboard` serving a running demo. Usage:
//   node live-view.mjs <url> [screenshot.png]
// Checks, each within a deadline (no fixed sleeps decide anything):
//   1. the page loads and its event stream turns it "live";
//   2. it shows both DCs of the partner API with their managers and 4 pods each;
//   3. without a reload, the DCs' demand and allocation change as the demand moves;
//   4. on a phone-sized screen nothing makes the page scroll sideways.
// Exits non-zero with the first failed check's reason.
import { chromium } from "playwright-core";

const [url, screenshot] = process.argv.slice(2);
if (!url) {
  console.error("usage: node live-view.mjs <url> [screenshot.png]");
  process.exit(2);
}
const LIMIT = "partner-api";
const DCS = ["bkk", "europe"];
const executablePath = process.env.LEASEHOLD_CHROMIUM || "/usr/bin/chromium";

function fail(why) {
  throw new Error(why);
}

/** Poll `probe` (returning a value or null) every 500 ms until it returns non-null or `ms` pass. */
async function until(ms, what, probe) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== null && v !== undefined && v !== false) return v;
    if (Date.now() > deadline) fail(`${what}: not within ${ms / 1000} s`);
    await new Promise(r => setTimeout(r, 500));
  }
}

/** Each DC's numbers in the partner API's card, as the page shows them. */
async function numbers(page) {
  return page.evaluate(([limit, dcs]) => {
    const out = {};
    for (const dc of dcs) {
      const row = document.querySelector(`[data-limit="${limit}"] tr[data-dc="${dc}"]`);
      if (!row) return null;
      const get = f => row.querySelector(`[data-field="${f}"]`)?.textContent ?? null;
      out[dc] = { demand: get("demand"), allocated: get("allocated"), manager: get("manager"), pods: get("pods") };
    }
    return out;
  }, [LIMIT, DCS]);
}

const browser = await chromium.launch({ executablePath, headless: true });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on("pageerror", e => errors.push(e.message));
  await page.goto(url, { waitUntil: "load", timeout: 30_000 });
  if ((await page.title()) !== "Leasehold: live leases") fail(`unexpected title ${await page.title()}`);
  await until(30_000, "the event stream turns the page live", () =>
    page.locator("#status").textContent().then(t => t === "live"));
  const first = await until(60_000, `both DCs (${DCS}) in the ${LIMIT} card with a manager and a lease`, async () => {
    const n = await numbers(page);
    return n && DCS.every(dc => n[dc].manager !== "–" && Number(n[dc].allocated) > 0) ? n : null;
  });
  console.log("live view: first", JSON.stringify(first));
  for (const dc of DCS) {
    await until(30_000, `4 pods listed for ${dc}`, () =>
      page.locator(`[data-pods-dc="${dc}"] summary`).textContent().then(t => t.startsWith(`${dc}: 4 pod(s)`)));
  }
  const coordinator = await page.locator("#coordinator").textContent();
  if (!/^coord-[ab]$/.test(coordinator)) fail(`the coordinator leader shown is ${coordinator}`);
  // The demo's day moves demand between the DCs: the same page (no reload) must follow it.
  const moved = await until(40_000, "demand and allocation change without a reload", async () => {
    const n = await numbers(page);
    const demand = DCS.some(dc => n[dc].demand !== first[dc].demand);
    const allocated = DCS.some(dc => n[dc].allocated !== first[dc].allocated);
    return demand && allocated ? n : null;
  });
  console.log("live view: later", JSON.stringify(moved));
  await until(30_000, "the allocation chart draws 10 samples", async () => {
    const path = page.locator(`[data-limit="${LIMIT}"] path[data-series="bkk:allocated_per_s"]`);
    return (await path.count()) === 1 && ((await path.getAttribute("d")) ?? "").split("L").length > 10;
  });
  if (errors.length) fail(`script errors on the page: ${errors.join("; ")}`);
  if (screenshot) {
    await page.locator('[data-pods-dc="bkk"] summary').click();
    await page.screenshot({ path: screenshot, fullPage: true });
    console.log(`live view: screenshot ${screenshot}`);
  }
  const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  await phone.goto(url, { waitUntil: "load", timeout: 30_000 });
  await until(30_000, "the phone view draws the partner API", () =>
    phone.locator(`[data-limit="${LIMIT}"]`).count().then(c => c === 1));
  const widths = await phone.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  if (widths[0] > widths[1]) fail(`on a 390 px screen the page is ${widths[0]} px wide (scrolls sideways)`);
  console.log(`live view: passed (phone width ${widths[0]} of ${widths[1]} px)`);
} catch (e) {
  console.error(`live view: FAILED: ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
