import { api, when } from "../api.js";
import { Busy, Failure, Page, Table, useLoad } from "../ui.jsx";

const optional = (p) => p.catch((error) => ({ error }));

export function Overview({ identity, context }) {
  const [data, error, busy] = useLoad(async () => {
    const [facts, entities, docs, schemas, audit, quotas] = await Promise.all([
      optional(api("GET", "/timeline", { limit: 1 })),
      optional(api("GET", "/entities", { limit: 1 })),
      optional(api("POST", "/documents/lookup", { op: "list", limit: 100 })),
      optional(api("GET", "/schemas")),
      optional(api("GET", "/audit", { limit: 10 })),
      optional(api("GET", "/quotas")),
    ]);
    return { facts, entities, docs, schemas, audit, quotas };
  }, [context]);
  const count = (r, field) => (r && !r.error ? r[field] : "—");
  const docs = data && !data.docs.error ? (data.docs.documents || []).length : "—";
  return (
    <Page title="Overview">
      <dl class="facts">
        <dt>Context</dt><dd>{context}</dd>
        <dt>Principal</dt><dd>{identity.principal}</dd>
        <dt>Key</dt><dd>{identity.key_id}</dd>
        <dt>Scopes this key sees</dt><dd>{(identity.grant || []).join(", ")}</dd>
      </dl>
      <Busy busy={busy} />
      <Failure error={error} />
      {data ? (
        <>
          <h2>What this key sees</h2>
          <ul class="counts">
            <li><strong>{count(data.facts, "total")}</strong> facts in memory</li>
            <li><strong>{count(data.entities, "total")}</strong> entities</li>
            <li><strong>{docs}</strong> documents</li>
            <li><strong>{data.schemas && !data.schemas.error ? (data.schemas.schemas || []).length : "—"}</strong> record schemas</li>
          </ul>
          <h2>Recent calls</h2>
          {data.audit.error ? <p class="muted">The audit trail is for a context's manager.</p> : (
            <Table caption="The ten latest calls" rows={data.audit.entries || []} columns={[
              { label: "When", render: (r) => when(r.at) }, { label: "Tool", key: "tool" },
              { label: "Principal", key: "principal" }, { label: "Outcome", key: "outcome" }]} />
          )}
          <h2>Quotas</h2>
          {data.quotas.error ? <p class="muted">Quotas are shown to a context's manager.</p> : (
            <Table caption="Limits and use now" rows={["requests_per_minute", "writes_per_day", "stored_bytes", "embeddings_per_day"]
              .map((k) => ({ id: k, name: k, ...data.quotas[k] }))} columns={[
              { label: "Quota", key: "name" }, { label: "Limit", render: (r) => r.limit ?? "none" },
              { label: "Used", render: (r) => r.used ?? "—" }]} />
          )}
        </>
      ) : null}
    </Page>
  );
}
