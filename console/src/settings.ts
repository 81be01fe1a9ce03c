// What a person sets for this browser: where a trace id links to (Jaeger,
// Tempo, Honeycomb…), as a URL with `{traceId}` in it. Only http(s) URLs are
// kept, so a setting can never make a link run script.
const TRACE_URL_KEY = "oz0.console.traceUrl";

export function traceUrlTemplate(): string {
  return localStorage.getItem(TRACE_URL_KEY) ?? "";
}

/** Saves `template` (empty forgets it); false when it is not an http(s) URL with `{traceId}`. */
export function saveTraceUrlTemplate(template: string): boolean {
  const trimmed = template.trim();
  if (trimmed === "") {
    localStorage.removeItem(TRACE_URL_KEY);
    return true;
  }
  if (!trimmed.includes("{traceId}") || !isHttp(trimmed.replaceAll("{traceId}", "0"))) return false;
  localStorage.setItem(TRACE_URL_KEY, trimmed);
  return true;
}

/** The link for `traceId`, or undefined when no viewer is set. */
export function traceLink(traceId: string): string | undefined {
  const template = traceUrlTemplate();
  if (!template || !traceId) return undefined;
  const url = template.replaceAll("{traceId}", encodeURIComponent(traceId));
  return isHttp(url) ? url : undefined;
}

function isHttp(url: string): boolean {
  try {
    const protocol = new URL(url).protocol;
    return protocol === "http:" || protocol === "https:";
  } catch {
    return false;
  }
}
