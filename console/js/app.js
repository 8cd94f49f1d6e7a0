// Renders the page boot.js found for this address (its route table is there, so the page's module is
// fetched while this one's imports are), and shows the nav links to whoever may use them.

import { audience } from "/console/js/audience.js";
import { h, problem, replace } from "/console/js/dom.js";

function markSection(section) {
  for (const link of document.querySelectorAll("header nav a")) {
    const here = link.getAttribute("href") === `/console/${section}`;
    if (here) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

/** Show each nav link only to whoever may use its pages (none while nobody has signed in). */
async function showNav() {
  const who = await audience().catch(() => null);
  for (const item of document.querySelectorAll("header nav li[data-for]")) {
    item.hidden = !who?.[item.dataset.for];
  }
  return who;
}

async function start() {
  const main = document.getElementById("main");
  const path = window.location.pathname;
  const found = globalThis.flowledgerBoot?.route ?? null;
  const loading = found ? import(`/console/js/pages/${found.module}.js`) : null;
  loading?.catch(() => {}); // its error, if any, is shown below
  const nav = showNav();
  // The landing page is the operators' flows list; a patient's is their own explanations. Any other page
  // renders at once: its reads wait for the configuration, never for the nav.
  if (/^\/console\/?$/.test(path)) {
    const who = await nav;
    if (who?.patient && !who.operator) {
      window.location.replace("/console/patient/flows");
      return;
    }
  }
  if (found) {
    markSection(found.section);
    try {
      const page = await loading;
      await page.render(main, { id: found.id, query: new URLSearchParams(window.location.search) });
    } catch (error) {
      replace(main, h("h1", {}, "Something went wrong"), problem(error));
    }
    await nav;
    await showNav(); // a page's first call may have signed someone in (cognito.js)
    main.dataset.ready = "true"; // the browser tests wait for this
    return;
  }
  document.title = "Not found · Flowledger";
  replace(main, h("h1", {}, "Page not found"), h("p", {}, h("a", { href: "/console/flows" }, "Go to the flows")));
  main.dataset.ready = "true";
}

start();
