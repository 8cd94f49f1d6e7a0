// The flow page's entry. It asks for the flow with its first page of steps in one read
// (GET /admin/v1/reasoning/flows/{id}?steps=) before it loads the view's code (flow_view.js and the graph,
// layout and table modules it imports), so the read and the code's download run at the same time instead of
// one after the other. Later pages come from .../steps?cursor=.

import { operatorFetch } from "/console/js/api.js";
import { preloadModules, stylesheet } from "/console/js/dom.js";

// The view and every module under it: three levels of imports, fetched in one round instead of three.
const VIEW_MODULES = [
  "/console/js/flow_view.js",
  "/console/js/flow_graph.js",
  "/console/js/flow_layout.js",
  "/console/js/flow_timeline.js",
  "/console/js/flow_steps_table.js",
  "/console/js/flow_values.js",
  "/console/js/radar.js",
];
const FLOW_ID = /^fl_[0-9A-Z]{26}$/;
const FIRST_PAGE = 500; // a flow of up to 500 steps in one read; a longer one is drawn from its first 500 on
const PAGE = 1000; // the route's largest page

function pageSize(query, fallback) {
  // ?page_size= (1-1000) reads every page at that size: the browser tests use small pages.
  const asked = Number(query?.get?.("page_size"));
  return Number.isInteger(asked) && asked >= 1 && asked <= PAGE ? asked : fallback;
}

function quietly(promise) {
  promise.catch(() => {}); // its error, if any, is shown by the view once it awaits it
  return promise;
}

/** Render the flow ``id`` into ``main``. */
export async function render(main, { id, query }) {
  stylesheet("/console/css/flow.css");
  stylesheet("/console/css/flow_graph.css"); // the graph asks for it as it first draws: too late to be ready then
  let reads = null;
  if (FLOW_ID.test(id || "")) {
    const base = `/admin/v1/reasoning/flows/${encodeURIComponent(id)}`;
    let sent;
    const sending = new Promise((resolve) => {
      sent = resolve;
    });
    const readPage = (limit, cursor) => operatorFetch(`${base}/steps`, { query: { limit, cursor } }).then((r) => r.body);
    const overview = quietly(operatorFetch(base, { query: { steps: pageSize(query, FIRST_PAGE) }, onSend: sent }).then((r) => r.body));
    reads = {
      overview,
      firstPage: quietly(overview.then((body) => body.first_steps)),
      readPage,
      pageSize: pageSize(query, PAGE),
    };
    // The view's code is asked for once the read is on its way (or has failed before it was): the browser
    // compiles modules on the thread that signs the read, and the read is the longer wait.
    await Promise.race([sending, overview.catch(() => {})]);
  }
  preloadModules(VIEW_MODULES);
  const view = await import("/console/js/flow_view.js");
  await view.render(main, { id, reads });
}
