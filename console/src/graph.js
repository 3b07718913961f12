// The graph picture: graphology holds it, ForceAtlas2 (Barnes-Hut above a few hundred nodes) lays it out, Sigma
// draws it with WebGL. Imported only by the graph page, so the first load carries none of it.
import Graph from "graphology";
import forceAtlas2 from "graphology-layout-forceatlas2";
import Sigma from "sigma";

export const COLORS = { Person: "#1f5fbf", Organization: "#b3470b", Location: "#1d7a3a" };
const OTHER = "#6b4fa0";

export function draw(container, data, { onNode, onEdge } = {}) {
  const started = performance.now();
  const graph = new Graph({ multi: true, type: "directed" });
  const n = data.nodes.length;
  data.nodes.forEach((node, i) => {
    const angle = (2 * Math.PI * i) / Math.max(n, 1);
    const radius = 10 + (i % 7);
    graph.addNode(node.id, {
      label: node.name, kind: node.type, x: Math.cos(angle) * radius, y: Math.sin(angle) * radius,
      size: (n > 500 ? 3 : 6) + Math.min(10, Math.log2(1 + (node.mention_count || 1)) * 2), color: COLORS[node.type] || OTHER,
    });
  });
  for (const edge of data.edges) {
    if (graph.hasNode(edge.source) && graph.hasNode(edge.target)) {
      graph.addDirectedEdgeWithKey(edge.id, edge.source, edge.target, { label: edge.type, kind: edge.type,
        size: Math.min(4, edge.weight || 1), color: "#8a8f98" });
    }
  }
  const settings = forceAtlas2.inferSettings(graph);
  forceAtlas2.assign(graph, { iterations: n > 1000 ? 60 : 120, settings: { ...settings, barnesHutOptimize: n > 300 } });
  const laidOut = performance.now();
  const renderer = new Sigma(graph, container, { enableEdgeEvents: true, renderEdgeLabels: n <= 100,
    labelRenderedSizeThreshold: n > 500 ? 10 : 0, labelFont: "system-ui, sans-serif",
    // a big picture moves without its edges and labels, which come back when it stops: panning stays smooth
    hideEdgesOnMove: n > 500, hideLabelsOnMove: n > 500 });
  if (onNode) renderer.on("clickNode", ({ node }) => onNode(node, graph.getNodeAttributes(node)));
  if (onEdge) renderer.on("clickEdge", ({ edge }) => onEdge(edge, graph.getEdgeAttributes(edge), graph.source(edge), graph.target(edge)));
  renderer.refresh();
  const drawn = performance.now();
  return { graph, renderer, layoutMs: laidOut - started, totalMs: drawn - started };
}

export function filter(handle, kinds) {
  handle.renderer.setSetting("nodeReducer", (node, attrs) => (kinds.has(attrs.kind) ? attrs : { ...attrs, hidden: true }));
  handle.renderer.refresh();
}

export function addNeighbours(handle, center, peers, edges) {
  const { graph } = handle;
  const origin = graph.getNodeAttributes(center);
  peers.forEach((p, i) => {
    if (!graph.hasNode(p.id)) {
      const angle = (2 * Math.PI * i) / Math.max(peers.length, 1);
      graph.addNode(p.id, { label: p.name, kind: p.type, x: origin.x + Math.cos(angle) * 3, y: origin.y + Math.sin(angle) * 3,
        size: 4, color: COLORS[p.type] || OTHER });
    }
  });
  for (const e of edges) {
    if (!graph.hasEdge(e.id) && graph.hasNode(e.source) && graph.hasNode(e.target)) {
      graph.addDirectedEdgeWithKey(e.id, e.source, e.target, { label: e.type, kind: e.type, size: 1, color: "#8a8f98" });
    }
  }
  handle.renderer.refresh();
}

/** A graph of `n` nodes and `m` edges, for the benchmark of the picture itself (`#/graph?synthetic=2000x5000`). */
export function synthetic(n, m) {
  const kinds = Object.keys(COLORS);
  const nodes = Array.from({ length: n }, (_, i) => ({ id: `n${i}`, name: `Entity ${i}`, type: kinds[i % 3], mention_count: 1 + (i % 9) }));
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const edges = Array.from({ length: m }, (_, i) => ({ id: `e${i}`, source: `n${Math.floor(rand() * n)}`,
    target: `n${Math.floor(rand() * n)}`, type: "related_to", weight: 1 }));
  return { nodes, edges: edges.filter((e) => e.source !== e.target), total_entities: n };
}
