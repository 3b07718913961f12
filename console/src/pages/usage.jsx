// Calls, errors, p50 / p99 and cost per day and tool, as charts; quotas and their use.
import { useEffect, useRef } from "preact/hooks";
import { api } from "../api.js";
import { Busy, Failure, Page, Table, useLoad } from "../ui.jsx";

function Chart({ title, days, series }) {
  const box = useRef(null);
  useEffect(() => {
    let plot = null;
    let live = true;
    Promise.all([import("uplot"), import("uplot/dist/uPlot.min.css")]).then(([{ default: UPlot }]) => {
      if (!live || !box.current) return;
      const x = days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
      plot = new UPlot({ title, width: Math.min(720, box.current.clientWidth || 720), height: 220,
        series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: ["#1f5fbf", "#b3470b", "#1d7a3a", "#6b4fa0"][i % 4], width: 2 }))] },
        [x, ...series.map((s) => s.values)], box.current);
    });
    return () => { live = false; if (plot) plot.destroy(); };
  }, [title, days, series]);
  return <figure class="chart"><div ref={box} /><figcaption class="visually-hidden">{title}</figcaption></figure>;
}

export function Usage({ context }) {
  const [data, error, busy] = useLoad(() => api("GET", "/usage"), [context]);
  const rows = data ? data.rows : [];
  const days = [...new Set(rows.map((r) => r.day))].sort();
  const per = (f) => days.map((d) => rows.filter((r) => r.day === d).reduce((a, r) => a + f(r), 0));
  const worst = (f) => days.map((d) => Math.max(0, ...rows.filter((r) => r.day === d).map(f)));
  return (
    <Page title="Usage" wide>
      <Busy busy={busy} />
      <Failure error={error} />
      {data && days.length ? (
        <>
          <Chart title="Calls and errors a day" days={days} series={[{ label: "calls", values: per((r) => r.calls) },
            { label: "errors", values: per((r) => r.errors) }]} />
          <Chart title="Server time (ms): the slowest tool's p50 and p99 a day" days={days}
            series={[{ label: "p50", values: worst((r) => r.p50_ms) }, { label: "p99", values: worst((r) => r.p99_ms) }]} />
          <Chart title="Embeddings and store reads a day" days={days} series={[
            { label: "embeddings", values: per((r) => r.cost.embeddings || 0) },
            { label: "store reads", values: per((r) => r.cost.store_reads || 0) }]} />
        </>
      ) : null}
      {data ? (
        <>
          <Table caption="Per day and tool" rows={rows} columns={[{ label: "Day", key: "day" }, { label: "Tool", key: "tool" },
            { label: "Calls", key: "calls" }, { label: "Errors", key: "errors" }, { label: "p50 ms", key: "p50_ms" },
            { label: "p99 ms", key: "p99_ms" }]} empty="No call in the last seven days." />
          <h2>Quotas</h2>
          <Table caption="Limits and use now" rows={["requests_per_minute", "writes_per_day", "stored_bytes", "embeddings_per_day"]
            .map((k) => ({ id: k, name: k, ...data.quotas[k] }))} columns={[{ label: "Quota", key: "name" },
            { label: "Limit", render: (r) => r.limit ?? "none" }, { label: "Used", render: (r) => r.used ?? "—" }]} />
        </>
      ) : null}
    </Page>
  );
}
