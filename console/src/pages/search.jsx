// One query, the bm25, vector and hybrid lists side by side with their scores, each hit marked with where each
// list ranked it; a document's hit shows its passage with the query's words highlighted.
import { useState } from "preact/hooks";
import { api } from "../api.js";
import { Failure, Field, Page } from "../ui.jsx";

const MODES = ["bm25", "vector", "hybrid"];

function hitsOf(source, answer) {
  if (source === "memories") return answer.results.map((r) => ({ id: r.id, text: r.text, score: r.score, where: r.kind }));
  return answer.results.map((r) => ({ id: r.chunk_id || r.id, text: r.content || (r.chunk && r.chunk.text) || "",
    score: r.score, where: r.title || (r.document && r.document.title) || r.document_id }));
}

function Highlighted({ text, query }) {
  const words = new Set(query.toLowerCase().match(/[\p{L}\p{N}]{3,}/gu) || []);
  return <span>{text.split(/([\p{L}\p{N}]+)/u).map((part) => words.has(part.toLowerCase()) ? <mark>{part}</mark> : part)}</span>;
}

export function Search({ context }) {
  const [query, setQuery] = useState("");
  const [source, setSource] = useState("memories");
  const [lists, setLists] = useState(null);
  const [error, setError] = useState(null);
  async function run(e) {
    e.preventDefault();
    setError(null);
    try {
      const answers = await Promise.all(MODES.map((mode) => source === "memories"
        ? api("POST", "/context", { query, mode, k: 10 })
        : api("POST", "/query", { query, mode, k: 10 })));
      setLists(Object.fromEntries(MODES.map((m, i) => [m, hitsOf(source, answers[i])])));
    } catch (err) {
      setError(err);
    }
  }
  const rank = (mode, id) => {
    const i = lists[mode].findIndex((h) => h.id === id);
    return i < 0 ? "—" : `#${i + 1}`;
  };
  return (
    <Page title="Search, explained" wide>
      <form class="row" onSubmit={run}>
        <Field label="Query"><input required value={query} onInput={(e) => setQuery(e.target.value)} /></Field>
        <Field label="In">
          <select value={source} onChange={(e) => { setSource(e.target.value); setLists(null); }}>
            <option value="memories">memories</option>
            <option value="documents">documents</option>
          </select>
        </Field>
        <button type="submit">Search</button>
      </form>
      <Failure error={error} />
      {lists ? (
        <div class="columns" data-testid="search-lists">
          {MODES.map((mode) => (
            <section aria-labelledby={`list-${mode}`} data-mode={mode}>
              <h2 id={`list-${mode}`}>{mode}</h2>
              <ol>
                {lists[mode].map((h) => (
                  <li class="hit">
                    <span class="score">{h.score.toFixed(3)}</span>
                    <span class="ranks" aria-label="Where each list ranked it">
                      {MODES.map((m) => <span class="rank">{m} {rank(m, h.id)}</span>)}
                    </span>
                    <small class="muted">{h.where}</small>
                    <p><Highlighted text={h.text} query={query} /></p>
                  </li>
                ))}
                {lists[mode].length === 0 ? <li class="muted">No hit.</li> : null}
              </ol>
            </section>
          ))}
        </div>
      ) : null}
    </Page>
  );
}
