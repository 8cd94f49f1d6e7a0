// The flow page's entry. It asks for the flow (GET /admin/v1/reasoning/flows/{id}) and its first page of
// steps (GET .../steps?limit=) before it loads the view's code (flow_view.js and the graph, layout and table
// modules it imports), so the two reads and the code's download run at the same time instead of one after
// the other.

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
    let sending = 2;
    let bothSent;
    const sent = new Promise((resolve) => {
      bothSent = resolve;
    });
    const onSend = () => --sending === 0 && bothSent();
    const readPage = (limit, cursor, options = {}) =>
      operatorFetch(`${base}/steps`, { query: cursor ? { limit, cursor } : { limit }, ...options }).then((r) => r.body);
    reads = {
      overview: quietly(operatorFetch(base, { onSend }).then((r) => r.body)),
      firstPage: quietly(readPage(pageSize(query, FIRST_PAGE), null, { onSend })),
      readPage,
      pageSize: pageSize(query, PAGE),
    };
    // The view's code is asked for once both reads are on their way (or one has failed before it was): the
    // browser compiles modules on the thread that signs the reads, and the reads are the longer wait.
    await Promise.race([sent, Promise.allSettled([reads.overview, reads.firstPage])]);
  }
  preloadModules(VIEW_MODULES);
  const view = await import("/console/js/flow_view.js");
  await view.render(main, { id, reads });
}
