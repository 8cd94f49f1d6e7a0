// A flow's steps as a layered graph, laid out in O(nodes + edges) (plus a sort per rank): a step's rank is one
// below its lowest parent, its place in the rank follows its parents' places. No DOM here: flow_graph.js draws.
//
// Repeated model/tool loops fold into one group node: in a chain (each step the only child of its only parent),
// a kind pattern of 1 to MAX_PERIOD steps repeated at least MIN_REPEATS times ("12 × llm_call → tool_call").

export const NODE_W = 184;
export const NODE_H = 58;
export const COL_W = 208; // node width plus the gap beside it
export const ROW_H = 92; // node height plus the gap below it
const MIN_REPEATS = 3;
const MAX_PERIOD = 3;
const EDGE_KEY = 2 ** 21; // more units than a flow may hold steps (20,000), so u * EDGE_KEY + v is unique

/** The steps read so far, indexed: parents and children by position in creation order. */
export class FlowSteps {
  constructor() {
    this.steps = [];
    this.indexOf = new Map();
    this.parents = [];
    this.children = [];
  }

  /** Add a page of steps (creation order). A step seen before is skipped; a parent not held is ignored. */
  append(page) {
    for (const step of page) {
      if (this.indexOf.has(step.step_id)) continue;
      const index = this.steps.length;
      this.steps.push(step);
      this.indexOf.set(step.step_id, index);
      const parents = [];
      for (const id of new Set(step.parent_step_ids || [])) {
        const parent = this.indexOf.get(id);
        if (parent === undefined) continue; // the API refuses such steps; an old record must not break the page
        parents.push(parent);
        this.children[parent].push(index);
      }
      this.parents.push(parents);
      this.children.push([]);
    }
  }

  get size() {
    return this.steps.length;
  }
}

function samePattern(kinds, chain, a, b, period) {
  for (let k = 0; k < period; k += 1) if (kinds[chain[a + k]] !== kinds[chain[b + k]]) return false;
  return true;
}

/**
 * The repeated loops: [{key, members (step indexes, in order), repeats, pattern (kinds)}].
 * Greedy from each chain's start, so a loop keeps its key (its first step) while later pages make it longer.
 */
export function findLoops(flow) {
  const { steps, parents, children } = flow;
  const kinds = steps.map((step) => step.step_kind);
  const chainOf = new Int32Array(steps.length);
  const chains = [];
  for (let i = 0; i < steps.length; i += 1) {
    const only = parents[i].length === 1 ? parents[i][0] : -1;
    if (only >= 0 && children[only].length === 1) {
      chainOf[i] = chainOf[only];
      chains[chainOf[i]].push(i);
    } else {
      chainOf[i] = chains.length;
      chains.push([i]);
    }
  }
  const loops = [];
  for (const chain of chains) {
    if (chain.length < MIN_REPEATS) continue;
    let a = 0;
    while (a < chain.length) {
      let best = null;
      for (let period = 1; period <= MAX_PERIOD; period += 1) {
        let repeats = 1;
        while (a + (repeats + 1) * period <= chain.length && samePattern(kinds, chain, a, a + repeats * period, period)) {
          repeats += 1;
        }
        if (repeats >= MIN_REPEATS && (!best || repeats * period > best.repeats * best.period)) best = { period, repeats };
      }
      if (!best) {
        a += 1;
        continue;
      }
      const members = chain.slice(a, a + best.repeats * best.period);
      loops.push({
        key: `loop:${steps[members[0]].step_id}`,
        members,
        repeats: best.repeats,
        pattern: members.slice(0, best.period).map((i) => kinds[i]),
      });
      a += members.length;
    }
  }
  return loops;
}

/** "12 × llm_call → tool_call". */
export function loopLabel(loop) {
  return `${loop.repeats} × ${loop.pattern.join(" → ")}`;
}

/**
 * Lay out the visible graph: every step, except the members of a loop not in ``expanded``, which show as
 * their loop. Units (nodes) come in the order of their first step, which is a topological order: a step's
 * parents are earlier steps, and only a loop's first member has parents outside it.
 */
export function layoutFlow(flow, loops, expanded) {
  const n = flow.size;
  const unitOf = new Int32Array(n).fill(-1);
  const loopAt = new Map();
  for (const loop of loops) if (!expanded.has(loop.key)) loopAt.set(loop.members[0], loop);
  const units = [];
  for (let i = 0; i < n; i += 1) {
    if (unitOf[i] >= 0) continue;
    const loop = loopAt.get(i);
    if (loop) {
      for (const member of loop.members) unitOf[member] = units.length;
      units.push({ key: loop.key, loop, first: i, last: loop.members[loop.members.length - 1] });
    } else {
      unitOf[i] = units.length;
      units.push({ key: flow.steps[i].step_id, step: flow.steps[i], first: i, last: i });
    }
  }
  const count = units.length;
  const unitParents = Array.from({ length: count }, () => []);
  const unitChildren = Array.from({ length: count }, () => []);
  const seen = new Set();
  let edges = 0;
  for (let i = 0; i < n; i += 1) {
    const v = unitOf[i];
    for (const p of flow.parents[i]) {
      const u = unitOf[p];
      if (u === v || seen.has(u * EDGE_KEY + v)) continue;
      seen.add(u * EDGE_KEY + v);
      unitParents[v].push(u);
      unitChildren[u].push(v);
      edges += 1;
    }
  }
  const rank = new Int32Array(count);
  let maxRank = 0;
  for (let v = 0; v < count; v += 1) {
    let r = 0;
    for (const u of unitParents[v]) if (rank[u] + 1 > r) r = rank[u] + 1;
    rank[v] = r;
    if (r > maxRank) maxRank = r;
  }
  const byRank = Array.from({ length: count ? maxRank + 1 : 0 }, () => []);
  for (let v = 0; v < count; v += 1) byRank[rank[v]].push(v);
  const x = new Float64Array(count);
  const y = new Float64Array(count);
  const order = new Int32Array(count);
  const key = new Float64Array(count);
  let widest = 1;
  for (let r = 0; r < byRank.length; r += 1) {
    const row = byRank[r];
    for (const v of row) {
      const ps = unitParents[v];
      let sum = 0;
      for (const u of ps) sum += x[u];
      key[v] = ps.length ? sum / ps.length : v * COL_W; // roots keep creation order
    }
    row.sort((a, b) => key[a] - key[b] || a - b);
    const middle = (row.length - 1) / 2;
    row.forEach((v, j) => {
      order[v] = j;
      x[v] = (j - middle) * COL_W;
      y[v] = r * ROW_H;
    });
    if (row.length > widest) widest = row.length;
  }
  const half = (widest * COL_W) / 2;
  return {
    units,
    unitOf,
    unitParents,
    unitChildren,
    rank,
    byRank,
    order,
    x,
    y,
    edges,
    bounds: { minX: -half, maxX: half, minY: -NODE_H / 2, maxY: Math.max(0, byRank.length - 1) * ROW_H + NODE_H / 2 },
  };
}
