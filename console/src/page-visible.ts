// Whether this tab is shown. The page's streams hold one HTTP connection
// each, and a browser opens at most six to one origin over plain HTTP (the
// orchestrator on loopback, as `oz0 dev` serves it): three tabs on job pages
// (two streams each) took them all, and a fourth tab, or Approve in any of
// them, waited for good. A tab that is not shown closes its streams, and
// opens them again, from where they were, when it is shown.
import { useEffect, useState } from "preact/hooks";

export function usePageVisible(): boolean {
  const [visible, setVisible] = useState(() => document.visibilityState !== "hidden");
  useEffect(() => {
    const changed = (): void => setVisible(document.visibilityState !== "hidden");
    document.addEventListener("visibilitychange", changed);
    return () => document.removeEventListener("visibilitychange", changed);
  }, []);
  return visible;
}
