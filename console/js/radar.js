// A radar chart as accessible SVG, without a chart library: one polygon per series over the same axes,
// a <title> tooltip on every vertex, and an aria-label that says what the chart shows in words.
// An axis not rated (score null: the flow held no data for it) gets no vertex and a dashed spoke; the
// polygon joins the rated vertices only, and the words say "not rated", never low or high.

import { s } from "/console/js/dom.js";

const TAU = Math.PI * 2;
const LABEL_LINE = 12; // characters per label line before a label wraps (a phone's narrow chart)
const LABEL_SIDE = 20; // room left and right of a labelled chart for labels that reach past it

/** Whether an axis has a score (the API sends null, bucket "not_rated", for an axis without data). */
export function isRated(axis) {
  return axis.score !== null && axis.score !== undefined;
}

/** An axis's score in words: "medium (4 of 7)", or "not rated". */
export function axisWords(axis, max = 7) {
  if (!isRated(axis)) return "not rated";
  return `${axis.bucket ? `${axis.bucket} ` : ""}(${axis.score} of ${max})`;
}

function point(center, radius, index, count, score, max) {
  const angle = -Math.PI / 2 + (TAU * index) / count;
  const r = (radius * Math.max(0, Math.min(max, score))) / max;
  return [center + r * Math.cos(angle), center + r * Math.sin(angle)];
}

function lines(label) {
  const out = [];
  for (const word of label.split(" ")) {
    const last = out.length - 1;
    if (last >= 0 && `${out[last]} ${word}`.length <= LABEL_LINE) out[last] += ` ${word}`;
    else out.push(word);
  }
  return out;
}

function label(x, y, anchor, text) {
  const parts = lines(text);
  const node = s("text", { x, y, "text-anchor": anchor, "dominant-baseline": "middle", class: "radar-label" });
  parts.forEach((line, i) => node.append(s("tspan", { x, dy: i === 0 ? `${-0.6 * (parts.length - 1)}em` : "1.2em" }, line)));
  return node;
}

/**
 * ``series``: [{name, axes: [{label, score (0..max), bucket}]}] with the same labels in the same order;
 * ``max`` is the scale's top (the API's decision dimensions score 0..7). Returns an <svg role="img"> of
 * ``size`` px; ``compact`` draws no axis labels (for lists).
 */
export function radarSvg(series, { size = 220, compact = false, title = "Radar", max = 7 } = {}) {
  const axes = series[0]?.axes || [];
  const pad = compact ? 6 : 56;
  const side = compact ? 0 : LABEL_SIDE;
  const center = size / 2;
  const radius = center - pad;
  const scoreText = (a) => axisWords(a, max);
  const described = series.map((one) => `${one.name}: ${one.axes.map((a) => `${a.label} ${scoreText(a)}`).join(", ")}`).join("; ");
  const svg = s("svg", {
    viewBox: `${-side} 0 ${size + 2 * side} ${size}`,
    width: size + 2 * side,
    height: size,
    role: "img",
    "aria-label": `${title}. ${described}`,
    class: compact ? "radar compact" : "radar",
  });
  svg.append(s("title", {}, `${title}. ${described}`));
  for (const ring of [0.25, 0.5, 0.75, 1]) {
    const ringPoints = axes.map((_, i) => point(center, radius, i, axes.length, ring * max, max).join(",")).join(" ");
    svg.append(s("polygon", { points: ringPoints, class: "radar-ring" }));
  }
  axes.forEach((axis, i) => {
    const [x, y] = point(center, radius, i, axes.length, max, max);
    // Dashed when no series rates it: the chart shows the gap instead of a vertex at the centre (a 0).
    const unrated = series.every((one) => !isRated(one.axes[i]));
    svg.append(s("line", { x1: center, y1: center, x2: x, y2: y, class: unrated ? "radar-spoke not-rated" : "radar-spoke" }));
    if (!compact) {
      const [lx, ly] = point(center, radius + 14, i, axes.length, max, max);
      const anchor = Math.abs(lx - center) < 4 ? "middle" : lx > center ? "start" : "end";
      svg.append(label(lx, ly, anchor, unrated ? `${axis.label} (not rated)` : axis.label));
    }
  });
  series.forEach((one, n) => {
    const points = one.axes.map((a, i) => (isRated(a) ? point(center, radius, i, one.axes.length, a.score, max) : null));
    const rated = points.filter(Boolean);
    const polygon = s("polygon", { points: rated.map((p) => p.join(",")).join(" "), class: `radar-area series-${n}` });
    polygon.append(s("title", {}, one.name));
    svg.append(polygon);
    one.axes.forEach((a, i) => {
      if (!points[i]) return; // not rated: no vertex (its words are in the label and the aria-label)
      const dot = s("circle", { cx: points[i][0], cy: points[i][1], r: compact ? 2 : 4, class: `radar-dot series-${n}` });
      // One series: the axis says it all; several: say whose vertex this is.
      const who = series.length > 1 ? `${one.name} · ` : "";
      dot.append(s("title", {}, `${who}${a.label}: ${scoreText(a)}`));
      svg.append(dot);
    });
  });
  return svg;
}
