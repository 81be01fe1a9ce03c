// A line diff for comparing agent versions: the longest common subsequence
// of lines between the common prefix and suffix. Definitions and
// instructions are short; past MAX_CELLS of table the middle is shown as
// removed then added, which is still correct, only less tidy.
export type DiffLine = { kind: "same" | "add" | "del"; text: string };

const MAX_CELLS = 4_000_000;

export function diffLines(before: string, after: string): DiffLine[] {
  const a = before.split("\n");
  const b = after.split("\n");
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const out: DiffLine[] = a.slice(0, start).map((text) => ({ kind: "same", text }));
  const midA = a.slice(start, endA);
  const midB = b.slice(start, endB);
  if (midA.length * midB.length > MAX_CELLS) {
    out.push(
      ...midA.map((text): DiffLine => ({ kind: "del", text })),
      ...midB.map((text): DiffLine => ({ kind: "add", text })),
    );
  } else {
    out.push(...lcs(midA, midB));
  }
  out.push(...a.slice(endA).map((text): DiffLine => ({ kind: "same", text })));
  return out;
}

function lcs(a: readonly string[], b: readonly string[]): DiffLine[] {
  const n = a.length;
  const m = b.length;
  // lengths[i][j]: the LCS of a[i:] and b[j:], in one flat array.
  const lengths = new Uint32Array((n + 1) * (m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lengths[i * (m + 1) + j] =
        a[i] === b[j]
          ? lengths[(i + 1) * (m + 1) + j + 1]! + 1
          : Math.max(lengths[(i + 1) * (m + 1) + j]!, lengths[i * (m + 1) + j + 1]!);
    }
  }
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      out.push({ kind: "same", text: a[i]! });
      i++;
      j++;
    } else if (lengths[(i + 1) * (m + 1) + j]! >= lengths[i * (m + 1) + j + 1]!)
      out.push({ kind: "del", text: a[i++]! });
    else out.push({ kind: "add", text: b[j++]! });
  }
  while (i < n) out.push({ kind: "del", text: a[i++]! });
  while (j < m) out.push({ kind: "add", text: b[j++]! });
  return out;
}

/** Lines that differ with `context` unchanged lines around each; longer unchanged runs become one `skip` entry. */
export function withContext(lines: readonly DiffLine[], context = 3): (DiffLine | { kind: "skip"; count: number })[] {
  const near = new Array<boolean>(lines.length).fill(false);
  lines.forEach((l, i) => {
    if (l.kind === "same") return;
    for (let j = Math.max(0, i - context); j <= Math.min(lines.length - 1, i + context); j++) near[j] = true;
  });
  const out: (DiffLine | { kind: "skip"; count: number })[] = [];
  lines.forEach((l, i) => {
    if (near[i]) {
      out.push(l);
      return;
    }
    const last = out[out.length - 1];
    if (last?.kind === "skip") last.count++;
    else out.push({ kind: "skip", count: 1 });
  });
  return out;
}
