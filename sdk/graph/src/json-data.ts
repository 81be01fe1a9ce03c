/**
 * What the bag may hold. A step's writes are checkpointed as JSON and a
 * resumed run reads them back from it, so a value JSON changes (a Date
 * becomes a string, NaN null, a Map `{}`) or cannot hold (a BigInt, a
 * cycle) made the resumed run see another bag than the run that wrote it,
 * or failed the write with a message naming neither step nor key.
 */

/**
 * Where `value` is not JSON data (null, booleans, finite numbers, strings,
 * arrays and plain objects) and what it holds there, as `"key".field is a
 * Date`; undefined when it is JSON data throughout.
 */
export function notJsonData(value: unknown, at: string, ancestors: object[] = []): string | undefined {
  if (value === null || typeof value === "string" || typeof value === "boolean") return undefined;
  if (typeof value === "number") return Number.isFinite(value) ? undefined : `${at} is ${value}`;
  if (typeof value !== "object") return `${at} is ${value === undefined ? "undefined" : `a ${typeof value}`}`;
  if (ancestors.includes(value)) return `${at} refers back to a value that holds it`;
  const proto = Object.getPrototypeOf(value) as object | null;
  if (!Array.isArray(value) && proto !== Object.prototype && proto !== null) {
    const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
    return `${at} is ${typeof name === "string" && name !== "" ? `a ${name}` : "not a plain object"}`;
  }
  ancestors.push(value);
  try {
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) {
        const problem = notJsonData(value[i], `${at}[${i}]`, ancestors);
        if (problem) return problem;
      }
      return undefined;
    }
    for (const [key, item] of Object.entries(value)) {
      const problem = notJsonData(item, `${at}.${JSON.stringify(key)}`, ancestors);
      if (problem) return problem;
    }
    return undefined;
  } finally {
    ancestors.pop();
  }
}

/** The first key of `values` whose value is not JSON data, described; undefined when all are. */
export function notJsonBag(values: Record<string, unknown>): string | undefined {
  for (const [key, value] of Object.entries(values)) {
    const problem = notJsonData(value, JSON.stringify(key));
    if (problem) return problem;
  }
  return undefined;
}

/** What to do about a value {@link notJsonBag} found. */
export const JSON_DATA_HINT =
  "bag values must be JSON data (null, booleans, finite numbers, strings, arrays and plain objects), which a resumed run reads back as they were written: convert it (a Date with toISOString(), for example)";
