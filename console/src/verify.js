// A receipt checked in the browser: WebCrypto's Ed25519 against the key the deployment publishes
// (/.well-known/engram-receipt-key), never against the key the receipt names (anyone can sign with their own).
// The signature covers the receipt without `signature`, as canonical JSON: keys sorted, no spaces, UTF-8 — as
// engram.receipts makes it.

function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
  }
  if (typeof value === "number" && !Number.isInteger(value)) throw new Error("a receipt holds no fractions");
  return JSON.stringify(value);
}

function fromB64url(text) {
  const b64 = text.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(text.length / 4) * 4, "=");
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

export async function verifyReceipt(receipt) {
  const published = await fetch("/.well-known/engram-receipt-key").then((r) => r.json());
  if (receipt.algorithm !== "Ed25519" || typeof receipt.signature !== "string") return { valid: false, why: "not a signed receipt" };
  if (receipt.public_key !== published.public_key) return { valid: false, why: "signed with another key than the deployment's" };
  const { signature, ...body } = receipt;
  const key = await crypto.subtle.importKey("raw", fromB64url(published.public_key), { name: "Ed25519" }, false, ["verify"]);
  const ok = await crypto.subtle.verify({ name: "Ed25519" }, key, fromB64url(signature), new TextEncoder().encode(canonical(body)));
  return ok ? { valid: true, why: "signature valid (Ed25519, the deployment's published key)" }
    : { valid: false, why: "the signature does not match the receipt's content" };
}
