// Renders the API's highlight (HTML-escaped text with <mark>…</mark>) without innerHTML.
const ENTITIES: Record<string, string> = { "&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#x27;": "'", "&#39;": "'" };
const unescape = (s: string) => s.replace(/&(amp|lt|gt|quot|#x27|#39);/g, (m) => ENTITIES[m] ?? m);

export function Highlight({ html, text }: { html: string | null | undefined; text: string }) {
  if (!html) return <>{text}</>;
  const parts = html.split(/<\/?mark>/);
  return (
    <>
      {parts.map((p, i) => (i % 2 ? <mark key={i}>{unescape(p)}</mark> : <span key={i}>{unescape(p)}</span>))}
    </>
  );
}
