// A radar chart as accessible SVG, without a chart library: one polygon per series over the same axes,
// a <title> tooltip on every vertex, and an aria-label that says what the chart shows in words.

import { s } from "/console/js/dom.js";

const TAU = Math.PI * 2;

function point(center, radius, index, count, score) {
  const angle = -Math.PI / 2 + (TAU * index) / count;
  const r = (radius * Math.max(0, Math.min(100, score))) / 100;
  return [center + r * Math.cos(angle), center + r * Math.sin(angle)];
}

/**
 * ``series``: [{name, axes: [{label, score (0..100), bucket}]}] with the same labels in the same order.
 * Returns an <svg role="img"> of ``size`` px; ``compact`` draws no axis labels (for lists).
 */
export function radarSvg(series, { size = 220, compact = false, title = "Radar" } = {}) {
  const axes = series[0]?.axes || [];
  const pad = compact ? 6 : 64;
  const center = size / 2;
  const radius = center - pad;
  const described = series
    .map((one) => `${one.name}: ${one.axes.map((a) => `${a.label} ${a.score}${a.bucket ? ` (${a.bucket})` : ""}`).join(", ")}`)
    .join("; ");
  const svg = s("svg", {
    viewBox: `0 0 ${size} ${size}`,
    width: size,
    height: size,
    role: "img",
    "aria-label": `${title}. ${described}`,
    class: compact ? "radar compact" : "radar",
  });
  svg.append(s("title", {}, `${title}. ${described}`));
  for (const ring of [25, 50, 75, 100]) {
    const ringPoints = axes.map((_, i) => point(center, radius, i, axes.length, ring).join(",")).join(" ");
    svg.append(s("polygon", { points: ringPoints, class: "radar-ring" }));
  }
  axes.forEach((axis, i) => {
    const [x, y] = point(center, radius, i, axes.length, 100);
    svg.append(s("line", { x1: center, y1: center, x2: x, y2: y, class: "radar-spoke" }));
    if (!compact) {
      const [lx, ly] = point(center, radius + 14, i, axes.length, 100);
      const anchor = Math.abs(lx - center) < 4 ? "middle" : lx > center ? "start" : "end";
      svg.append(s("text", { x: lx, y: ly, "text-anchor": anchor, "dominant-baseline": "middle", class: "radar-label" }, axis.label));
    }
  });
  series.forEach((one, n) => {
    const points = one.axes.map((a, i) => point(center, radius, i, one.axes.length, a.score));
    const polygon = s("polygon", { points: points.map((p) => p.join(",")).join(" "), class: `radar-area series-${n}` });
    polygon.append(s("title", {}, one.name));
    svg.append(polygon);
    one.axes.forEach((a, i) => {
      const dot = s("circle", { cx: points[i][0], cy: points[i][1], r: compact ? 2 : 4, class: `radar-dot series-${n}` });
      dot.append(s("title", {}, `${one.name} · ${a.label}: ${a.score}${a.bucket ? ` (${a.bucket})` : ""}`));
      svg.append(dot);
    });
  });
  return svg;
}
