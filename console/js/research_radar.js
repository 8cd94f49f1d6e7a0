// The decision-dimensions radar as the operator pages show it: the API's six 0-7 axes, with the same
// scores kept beside the chart in words.

import { h } from "/console/js/dom.js";
import { isRated } from "/console/js/radar.js";

export const AXES = ["confidence", "coverage", "maturity", "recency", "consensus", "risk"];
export const AXIS_LABELS = {
  confidence: "Confidence",
  coverage: "Coverage",
  maturity: "Maturity",
  recency: "Recency",
  consensus: "Consensus",
  risk: "Risk",
};
const AXIS_MAX = 7;

/** One radarSvg series from a pathway's ``dimensions`` ({axis: {score 0..7, bucket}}). */
export function seriesOf(name, dimensions) {
  return {
    name,
    axes: AXES.map((axis) => ({
      label: AXIS_LABELS[axis],
      score: dimensions[axis].score,
      bucket: dimensions[axis].bucket,
    })),
  };
}

/** The six axes as a definition grid: "Coverage 4/7 · medium", or "not rated" without data (Risk is a caution flag: high is bad). */
export function axesGrid(dimensions) {
  return h(
    "dl",
    { class: "grid axes" },
    AXES.map((axis) =>
      h(
        "div",
        {},
        h("dt", {}, axis === "risk" ? "Risk (caution)" : AXIS_LABELS[axis]),
        h("dd", { class: isRated(dimensions[axis]) ? null : "not-rated" }, isRated(dimensions[axis]) ? `${dimensions[axis].score}/${AXIS_MAX} · ${dimensions[axis].bucket}` : "not rated"),
      ),
    ),
  );
}
