// Routes a /console/... address to its page module. Pages are plain links (no client-side history):
// every page loads on its own, so a copied address always opens the same view.

import { audience } from "/console/js/audience.js";
import { h, problem, replace } from "/console/js/dom.js";

const ROUTES = [
  [/^\/console\/?$/, "flow_search", "flows"],
  [/^\/console\/flows\/?$/, "flow_search", "flows"],
  [/^\/console\/flows\/([^/]+)$/, "flow", "flows"],
  [/^\/console\/research\/?$/, "research", "research"],
  [/^\/console\/pathways\/?$/, "pathways", "pathways"],
  [/^\/console\/chat\/?$/, "chat", "chat"],
  [/^\/console\/patient\/?$/, "profile", "patient"],
  [/^\/console\/patient\/flows\/?$/, "patient", "patient/flows"],
  [/^\/console\/patient\/flows\/([^/]+)$/, "patient", "patient/flows"],
];

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

function route(path) {
  for (const [pattern, module, section] of ROUTES) {
    const match = pattern.exec(path);
    if (match) return { module, section, id: match[1] ? decodeURIComponent(match[1]) : null };
  }
  return null;
}

async function start() {
  const main = document.getElementById("main");
  const path = window.location.pathname;
  const found = route(path);
  // The page's code is fetched while the configuration is (not after): each is a round trip.
  const loading = found ? import(`/console/js/pages/${found.module}.js`) : null;
  loading?.catch(() => {}); // its error, if any, is shown below
  const who = await showNav();
  // The landing page is the operators' flows list; a patient's is their own explanations.
  if (/^\/console\/?$/.test(path) && who?.patient && !who.operator) {
    window.location.replace("/console/patient/flows");
    return;
  }
  if (found) {
    markSection(found.section);
    try {
      const page = await loading;
      await page.render(main, { id: found.id, query: new URLSearchParams(window.location.search) });
    } catch (error) {
      replace(main, h("h1", {}, "Something went wrong"), problem(error));
    }
    await showNav(); // a page's first call may have signed someone in (cognito.js)
    main.dataset.ready = "true"; // the browser tests wait for this
    return;
  }
  document.title = "Not found · Flowledger";
  replace(main, h("h1", {}, "Page not found"), h("p", {}, h("a", { href: "/console/flows" }, "Go to the flows")));
  main.dataset.ready = "true";
}

start();
