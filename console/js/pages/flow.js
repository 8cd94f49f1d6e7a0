// The flow page's entry. It asks for the flow (GET /admin/v1/reasoning/flows/{id}) and its first page of
// steps (GET .../steps?limit=) before it loads the view's code (flow_view.js and the graph, layout and table
// modules it imports), so the two reads and the code's download run at the same time instead of one after
// the other.

import { operatorFetch } from "/console/js/api.js";
import { stylesheet } from "/console/js/dom.js";

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
  let reads = null;
  if (FLOW_ID.test(id || "")) {
    const base = `/admin/v1/reasoning/flows/${encodeURIComponent(id)}`;
    const readPage = (limit, cursor) =>
      operatorFetch(`${base}/steps`, { query: cursor ? { limit, cursor } : { limit } }).then((r) => r.body);
    reads = {
      overview: quietly(operatorFetch(base).then((r) => r.body)),
      firstPage: quietly(readPage(pageSize(query, FIRST_PAGE))),
      readPage,
      pageSize: pageSize(query, PAGE),
    };
  }
  const view = await import("/console/js/flow_view.js");
  await view.render(main, { id, reads });
}
