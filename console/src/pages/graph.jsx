// Entities and their typed relations as an interactive picture: pan and zoom (Sigma's own, mouse and touch), filter
// by type, click a node to expand its neighbours, click an edge for its evidence (the sentences and sources).
import { useEffect, useRef, useState } from "preact/hooks";
import { api } from "../api.js";
import { Failure, Page } from "../ui.jsx";

const KINDS = ["Person", "Organization", "Location"];

export function GraphPage({ context }) {
  const box = useRef(null);
  const handle = useRef(null);
  const lib = useRef(null);
  const [status, setStatus] = useState("Loading…");
  const [error, setError] = useState(null);
  const [shown, setShown] = useState(new Set(KINDS));
  const [picked, setPicked] = useState(null);
  useEffect(() => {
    let live = true;
    (async () => {
      try {
        const want = new URLSearchParams(window.location.hash.split("?")[1] || "").get("synthetic");
        const [graphLib, data] = await Promise.all([
          import("../graph.js"),
          want ? Promise.resolve(null) : api("GET", "/graph", { limit: 2000 }),
        ]);
        if (!live) return;
        lib.current = graphLib;
        const [n, m] = (want || "0x0").split("x").map(Number);
        const shape = data || graphLib.synthetic(n, m);
        handle.current = graphLib.draw(box.current, shape, {
          onNode: async (id, attrs) => {
            const rel = await api("GET", "/entities/relationships", { entity_id: id });
            const peers = rel.relationships.map((r) => r.target);
            const edges = rel.relationships.map((r) => ({ id: r.id, type: r.type,
              source: r.direction === "outgoing" ? id : r.target.id, target: r.direction === "outgoing" ? r.target.id : id }));
            graphLib.addNeighbours(handle.current, id, peers, edges);
            setPicked({ title: `${attrs.label} (${attrs.kind})`, items: rel.relationships.map((r) =>
              `${r.direction === "outgoing" ? "→" : "←"} ${r.type} ${r.target.name}`) });
          },
          onEdge: async (edgeId, attrs, source) => {
            const rel = await api("GET", "/entities/relationships", { entity_id: source });
            const found = rel.relationships.find((r) => r.id === edgeId);
            setPicked({ title: `${attrs.label}`, items: (found ? found.evidence : []).map((ev) =>
              `${ev.sentence || ev.text || ""} — ${ev.kind || ""} ${ev.id || ""}`) });
          },
        });
        const h = handle.current;
        box.current.dataset.nodes = String(h.graph.order);
        box.current.dataset.edges = String(h.graph.size);
        box.current.dataset.renderMs = h.totalMs.toFixed(1);
        setStatus(`${h.graph.order} entities, ${h.graph.size} relations${shape.total_entities > h.graph.order
          ? ` (the ${h.graph.order} most mentioned of ${shape.total_entities})` : ""}; laid out and drawn in ${Math.round(h.totalMs)} ms`);
      } catch (err) {
        if (live) setError(err);
      }
    })();
    return () => {
      live = false;
      if (handle.current) handle.current.renderer.kill();
    };
  }, [context]);
  function toggle(kind) {
    const next = new Set(shown);
    if (next.has(kind)) next.delete(kind);
    else next.add(kind);
    setShown(next);
    if (handle.current) lib.current.filter(handle.current, next);
  }
  return (
    <Page title="Graph" wide>
      <fieldset class="row">
        <legend>Show</legend>
        {KINDS.map((k) => (
          <label class="check"><input type="checkbox" checked={shown.has(k)} onChange={() => toggle(k)} />
            <span class={`swatch ${k}`} aria-hidden="true" /> {k}</label>
        ))}
      </fieldset>
      <p role="status" data-testid="graph-status">{status}</p>
      <Failure error={error} />
      <div class="graph" ref={box} role="img" aria-label="The entities and relations as a picture: drag to pan, scroll to zoom" />
      {picked ? (
        <aside class="detail" aria-label="What the picture holds there">
          <h2>{picked.title}</h2>
          <ul>{picked.items.map((t) => <li>{t}</li>)}</ul>
        </aside>
      ) : null}
    </Page>
  );
}
