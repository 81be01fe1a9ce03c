// Routes live in the URL's fragment (`#/jobs/ID`), so every page survives a
// reload on any static host, and the login code of `#/login?code=` is never
// sent to a server or written to its logs.
import { useEffect, useState } from "preact/hooks";

/** The jobs page's filters; "" means any. */
export interface JobsFilter {
  /** A state's name: `running`, `waiting`, … */
  state: string;
  agent: string;
  text: string;
}

export const NO_FILTER: JobsFilter = { state: "", agent: "", text: "" };

export type Route =
  | { page: "jobs"; filter: JobsFilter }
  | { page: "job"; jobId: string }
  | { page: "approvals" }
  | { page: "agents" }
  /** Version 0: the latest. */
  | { page: "agent"; name: string; version: number }
  | { page: "graphs" }
  /** `run`: a run's job id, or "" for the definition alone. */
  | { page: "graph"; name: string; run: string }
  /** `window`: how far back (`1h`, `24h`, `7d`, `30d`). */
  | { page: "usage"; window: string }
  | { page: "login"; code: string | undefined };

export function parseRoute(hash: string): Route {
  const [pathPart = "", query = ""] = hash.replace(/^#/, "").split("?");
  const parts = pathPart.split("/").filter(Boolean).map(decodedPart);
  if (parts[0] === "login") return { page: "login", code: new URLSearchParams(query).get("code") ?? undefined };
  if (parts[0] === "jobs" && parts[1]) return { page: "job", jobId: parts[1] };
  if (parts[0] === "approvals") return { page: "approvals" };
  if (parts[0] === "agents" && parts[1]) return { page: "agent", name: parts[1], version: Number(parts[2]) || 0 };
  if (parts[0] === "agents") return { page: "agents" };
  if (parts[0] === "graphs" && parts[1])
    return { page: "graph", name: parts[1], run: new URLSearchParams(query).get("run") ?? "" };
  if (parts[0] === "graphs") return { page: "graphs" };
  if (parts[0] === "usage") return { page: "usage", window: new URLSearchParams(query).get("window") ?? "24h" };
  const q = new URLSearchParams(query);
  return {
    page: "jobs",
    filter: { state: q.get("state") ?? "", agent: q.get("agent") ?? "", text: q.get("text") ?? "" },
  };
}

/** A part of the route decoded, or as written when it holds a `%` that is no escape (decodeURIComponent throws). */
function decodedPart(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

export function href(route: Route): string {
  switch (route.page) {
    case "jobs": {
      const q = new URLSearchParams();
      for (const [key, value] of Object.entries(route.filter)) if (value) q.set(key, value);
      const query = q.toString();
      return query ? `#/jobs?${query}` : "#/jobs";
    }
    case "job":
      return `#/jobs/${encodeURIComponent(route.jobId)}`;
    case "approvals":
      return "#/approvals";
    case "agents":
      return "#/agents";
    case "agent":
      return `#/agents/${encodeURIComponent(route.name)}${route.version ? `/${route.version}` : ""}`;
    case "graphs":
      return "#/graphs";
    case "graph":
      return `#/graphs/${encodeURIComponent(route.name)}${route.run ? `?run=${encodeURIComponent(route.run)}` : ""}`;
    case "usage":
      return route.window === "24h" ? "#/usage" : `#/usage?window=${encodeURIComponent(route.window)}`;
    case "login":
      return "#/login";
  }
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(window.location.hash));
  useEffect(() => {
    const changed = (): void => setRoute(parseRoute(window.location.hash));
    window.addEventListener("hashchange", changed);
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return route;
}

/** Go to `route` without leaving the current URL in the history (the login code). */
export function replaceRoute(route: Route): void {
  window.history.replaceState(null, "", href(route));
  window.dispatchEvent(new HashChangeEvent("hashchange"));
}
