// The trail with filters, the chain's status (verified, or where it breaks) and an entry's detail.
import { useState } from "preact/hooks";
import { api, when } from "../api.js";
import { Busy, Failure, Field, Page, Table, useLoad } from "../ui.jsx";

export function Audit({ context }) {
  const [tool, setTool] = useState("");
  const [keyId, setKeyId] = useState("");
  const [data, error, busy] = useLoad(async () => {
    const [trail, chain] = await Promise.all([
      api("GET", "/audit", { limit: 100, tool: tool || undefined, key_id: keyId || undefined }),
      api("GET", "/audit/verify"),
    ]);
    return { trail, chain };
  }, [context, tool, keyId]);
  const [entry, setEntry] = useState(null);
  return (
    <Page title="Audit" wide>
      <Busy busy={busy} />
      <Failure error={error} />
      {data ? (
        <p role="status" class={data.chain.ok ? "ok" : "error"} data-testid="chain-status">
          {data.chain.ok ? `The chain verifies: ${data.chain.entries} entries (${data.chain.first ?? "–"} to ${data.chain.last ?? "–"}).`
            : `The chain breaks: ${(data.chain.problems || []).map((p) => JSON.stringify(p)).join("; ")}`}
        </p>
      ) : null}
      <form class="row" onSubmit={(e) => e.preventDefault()}>
        <Field label="Tool"><input value={tool} onChange={(e) => setTool(e.target.value)} /></Field>
        <Field label="Key id"><input value={keyId} onChange={(e) => setKeyId(e.target.value)} /></Field>
      </form>
      {data ? <Table caption="The trail, newest first" rows={data.trail.entries} onRow={setEntry} columns={[
        { label: "Seq", key: "seq" }, { label: "When", render: (r) => when(r.at) }, { label: "Tool", key: "tool" },
        { label: "Key", key: "key_id" }, { label: "Outcome", render: (r) => r.outcome + (r.code ? ` (${r.code})` : "") }]} /> : null}
      {entry ? (
        <aside class="detail" aria-label="The entry">
          <h2>Entry {entry.seq}</h2>
          <pre class="code">{JSON.stringify(entry, null, 2)}</pre>
        </aside>
      ) : null}
    </Page>
  );
}
