// A user's facts with their validity windows on a timeline (Paris until March, Berlin since), an as-of slider
// showing what was true then, each fact's history and the turn that stated it, and forget.
import { useMemo, useState } from "preact/hooks";
import { api, when } from "../api.js";
import { Busy, Failure, Field, Page, useLoad } from "../ui.jsx";

const DAY = 86_400_000;

export function Memories({ context }) {
  const [subject, setSubject] = useState("");
  const [data, error, busy, reload] = useLoad(() => api("GET", "/timeline", { limit: 2000, subject: subject || undefined }), [context, subject]);
  const facts = data ? data.facts : [];
  const [start, end] = useMemo(() => {
    const times = facts.flatMap((f) => [Date.parse(f.valid_from), f.valid_until ? Date.parse(f.valid_until) : Date.now()]);
    if (!times.length) return [Date.now() - DAY, Date.now()];
    const [low, high] = [Math.min(...times), Math.max(Date.now(), ...times)];
    return [low, high + Math.max(DAY, (high - low) * 0.1)]; // room on the right for what holds now
  }, [facts]);
  const [asOf, setAsOf] = useState(null);
  const at = asOf ?? end;
  const rows = useMemo(() => {
    const byKey = new Map();
    for (const f of facts) {
      const k = `${f.subject} · ${f.key}`;
      byKey.set(k, [...(byKey.get(k) || []), f]);
    }
    return [...byKey.entries()].sort((a, b) => a[0].localeCompare(b[0]));
  }, [facts]);
  const [picked, setPicked] = useState(null);
  const [forgetting, setForgetting] = useState("");
  const [note, setNote] = useState(null);
  const span = Math.max(end - start, 1);
  const pct = (t) => `${((t - start) / span) * 100}%`;
  async function forget(e) {
    e.preventDefault();
    try {
      const out = await api("POST", "/forget", { query: forgetting });
      setNote(`Forgot ${out.deleted} fact${out.deleted === 1 ? "" : "s"}.`);
      setForgetting("");
      reload();
    } catch (err) {
      setNote(err.message);
    }
  }
  const trueThen = facts.filter((f) => Date.parse(f.valid_from) <= at && (!f.valid_until || Date.parse(f.valid_until) > at));
  return (
    <Page title="Memories" wide>
      <form class="row" onSubmit={(e) => e.preventDefault()}>
        <Field label="Whose facts"><input value={subject} placeholder="everyone's" onChange={(e) => setSubject(e.target.value)} /></Field>
      </form>
      <Busy busy={busy} />
      <Failure error={error} />
      <Field label={`As of ${when(new Date(at).toISOString())}`}>
        <input type="range" min={start} max={end} step={Math.max(1, Math.floor(span / 500))} value={at}
          aria-valuetext={when(new Date(at).toISOString())} onInput={(e) => setAsOf(Number(e.target.value))} />
      </Field>
      <h2>True then</h2>
      <ul class="truths" data-testid="true-then">
        {trueThen.map((f) => <li><strong>{f.subject}</strong> {f.key.replace(/_/g, " ")}: {f.value}</li>)}
        {trueThen.length === 0 ? <li class="muted">No fact was valid then.</li> : null}
      </ul>
      <h2>Timeline</h2>
      <div class="timeline" role="list" aria-label="Facts and the time each held">
        {rows.map(([label, items]) => (
          <div class="lane" role="listitem">
            <span class="lane-label">{label}</span>
            <div class="lane-track">
              {items.map((f) => {
                const from = Date.parse(f.valid_from);
                const to = f.valid_until ? Date.parse(f.valid_until) : end;
                return (
                  <button type="button" class={f.valid_until ? "span past" : "span"} data-fact={f.id}
                    style={{ left: pct(from), width: `max(3.5em, calc(${pct(to)} - ${pct(from)}))` }}
                    aria-label={`${f.value}: from ${when(f.valid_from)}${f.valid_until ? ` until ${when(f.valid_until)}` : " on"}`}
                    onClick={() => setPicked(f)}>
                    {f.value}
                  </button>
                );
              })}
            </div>
            <div class="cursor" style={{ left: pct(at) }} aria-hidden="true" />
          </div>
        ))}
      </div>
      {picked ? (
        <aside class="detail" aria-label="The fact's history">
          <h2>{picked.subject} · {picked.key.replace(/_/g, " ")}</h2>
          <ol>
            {facts.filter((f) => f.subject === picked.subject && f.key === picked.key).map((f) => (
              <li>
                <strong>{f.value}</strong> — from {when(f.valid_from)}{f.valid_until ? ` until ${when(f.valid_until)}` : ""} ({f.status})
                <blockquote>{f.said ?? "The turn that said it is not yours to see."}</blockquote>
              </li>
            ))}
          </ol>
        </aside>
      ) : null}
      <h2>Forget</h2>
      <form class="row" onSubmit={forget}>
        <Field label="What to forget"><input required value={forgetting} onInput={(e) => setForgetting(e.target.value)} /></Field>
        <button type="submit">Forget</button>
      </form>
      {note ? <p role="status">{note}</p> : null}
    </Page>
  );
}
