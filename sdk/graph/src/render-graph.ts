/**
 * Drawings of a definition for `oz0 graph show NAME`: a tree for the terminal
 * and Mermaid for anything that renders it. Both label nodes with their stable
 * ids, the same ids events and spans carry.
 */
import { subgraphsOf, type Flow, type GraphDefinition, type GraphNode } from "./definition.js";

/**
 * A terminal drawing: steps run top to bottom, branches of a parallel node
 * run at the same time and join before the next step.
 */
export function renderGraph(definition: GraphDefinition): string {
  const lines: string[] = [];
  const head = [definition.id];
  if (definition.version !== undefined) head.push(`version ${definition.version}`);
  if (definition.managerAgent !== undefined) head.push(`manager agent:${definition.managerAgent}`);
  if (definition.triggers?.length) head.push(`triggers ${definition.triggers.map((t) => t.type).join(", ")}`);
  lines.push(head.join("  ·  "));

  const graphs = subgraphsOf(definition);
  const expanding: string[] = [];
  const flow = (f: Flow, indent: string): void => {
    f.forEach((n, i) => node(n, indent, i === f.length - 1));
    if (f.length === 0) lines.push(`${indent}└─ (nothing)`);
  };
  const group = (label: string, f: Flow, indent: string, last: boolean): void => {
    lines.push(`${indent}${last ? "└─" : "├─"} ${label}`);
    flow(f, `${indent}${last ? "   " : "│  "}`);
  };
  const node = (n: GraphNode, indent: string, last: boolean): void => {
    const branch = last ? "└─" : "├─";
    const inner = `${indent}${last ? "   " : "│  "}`;
    switch (n.kind) {
      case "agent":
        lines.push(`${indent}${branch} ${n.id}`);
        return;
      case "step":
        lines.push(`${indent}${branch} ${n.id}${n.module ? `  (${n.export ?? "default"} from ${n.module})` : ""}`);
        return;
      case "graph": {
        lines.push(`${indent}${branch} ${n.id}`);
        const target = graphs[n.graph];
        if (!target || expanding.includes(n.graph)) {
          lines.push(`${inner}└─ (${target ? "cycle" : "undefined subgraph"})`);
          return;
        }
        expanding.push(n.graph);
        flow(target, inner);
        expanding.pop();
        return;
      }
      case "parallel":
        lines.push(
          `${indent}${branch} ${n.id}  (branches run at the same time, then join${n.failFast === false ? "" : "; a failure cancels the others"})`,
        );
        n.branches.forEach((b, j) => group(`branch ${j + 1}`, b, inner, j === n.branches.length - 1));
        return;
      case "choice": {
        const on = n.evaluator ? `${n.evaluator.id} sets ${n.key}` : `on bag key "${n.key}"`;
        lines.push(`${indent}${branch} ${n.id}  (${on})`);
        const arms: [string, Flow][] = n.arms.map((a) => [`when "${a.label}"`, a.flow]);
        if (n.otherwise) arms.push(["otherwise", n.otherwise]);
        arms.forEach(([label, f], j) => group(label, f, inner, j === arms.length - 1));
        return;
      }
      case "loop":
        lines.push(`${indent}${branch} ${n.id}  (at most ${n.maxIterations ?? "?"} iterations)`);
        group("body", n.body, inner, false);
        group("until (sets choice: again | break)", n.until ?? [], inner, true);
        return;
    }
  };
  flow(definition.root, "");
  return `${lines.join("\n")}\n`;
}

interface Exit {
  id: string;
  label?: string;
}

/** A Mermaid `flowchart` of the definition; subgraphs become Mermaid subgraphs. */
export function toMermaid(definition: GraphDefinition): string {
  const out: string[] = ["flowchart TD"];
  const graphs = subgraphsOf(definition);
  const expanding: string[] = [];
  let counter = 0;
  const fresh = (prefix = "n"): string => `${prefix}${counter++}`;
  const text = (s: string): string => `"${s.replace(/"/g, "#quot;")}"`;
  const edge = (from: Exit, to: string): void => {
    out.push(from.label !== undefined ? `  ${from.id} -->|${text(from.label)}| ${to}` : `  ${from.id} --> ${to}`);
  };

  /** Emits `f`, returns its entry and exits, or null when empty. */
  const flow = (f: Flow): { entry: string; exits: Exit[] } | null => {
    let entry: string | null = null;
    let exits: Exit[] = [];
    for (const n of f) {
      const part = node(n);
      if (!part) continue;
      if (entry === null) entry = part.entry;
      else exits.forEach((e) => edge(e, part.entry));
      exits = part.exits;
    }
    return entry === null ? null : { entry, exits };
  };

  const node = (n: GraphNode): { entry: string; exits: Exit[] } | null => {
    switch (n.kind) {
      case "agent": {
        const id = fresh();
        out.push(`  ${id}[${text(n.id)}]`);
        return { entry: id, exits: [{ id }] };
      }
      case "step": {
        const id = fresh();
        out.push(`  ${id}[[${text(n.id)}]]`);
        return { entry: id, exits: [{ id }] };
      }
      case "graph": {
        const target = graphs[n.graph];
        if (!target || expanding.includes(n.graph)) {
          const id = fresh();
          out.push(`  ${id}[${text(`${n.id} (${target ? "cycle" : "undefined"})`)}]`);
          return { entry: id, exits: [{ id }] };
        }
        out.push(`  subgraph ${fresh("g")}[${text(n.id)}]`);
        expanding.push(n.graph);
        const inner = flow(target);
        expanding.pop();
        out.push("  end");
        return inner;
      }
      case "parallel": {
        const fork = fresh();
        const join = fresh();
        out.push(`  ${fork}{{${text(`${n.id} fork`)}}}`, `  ${join}{{${text("join")}}}`);
        for (const b of n.branches) {
          const part = flow(b);
          if (!part) edge({ id: fork }, join);
          else {
            edge({ id: fork }, part.entry);
            part.exits.forEach((e) => edge(e, join));
          }
        }
        return { entry: fork, exits: [{ id: join }] };
      }
      case "choice": {
        const decide = fresh();
        out.push(`  ${decide}{${text(n.evaluator ? n.id : `${n.id}`)}}`);
        let entry = decide;
        if (n.evaluator) {
          const ev = node(n.evaluator);
          if (ev) {
            entry = ev.entry;
            ev.exits.forEach((e) => edge(e, decide));
          }
        }
        const exits: Exit[] = [];
        const arms: [string, Flow][] = n.arms.map((a) => [a.label, a.flow]);
        if (n.otherwise) arms.push(["otherwise", n.otherwise]);
        for (const [label, f] of arms) {
          const part = flow(f);
          if (!part) exits.push({ id: decide, label });
          else {
            edge({ id: decide, label }, part.entry);
            exits.push(...part.exits);
          }
        }
        return { entry, exits };
      }
      case "loop": {
        const body = flow(n.body);
        const until = flow(n.until ?? []);
        if (!body || !until) return body ?? until;
        body.exits.forEach((e) => edge(e, until.entry));
        until.exits.forEach((e) => edge({ id: e.id, label: `again (max ${n.maxIterations ?? "?"})` }, body.entry));
        return { entry: body.entry, exits: until.exits.map((e) => ({ id: e.id, label: "break" })) };
      }
    }
  };

  // Mermaid reserves "end", so node ids never start with it.
  const start = fresh("begin");
  const end = fresh("finish");
  out.push(`  ${start}([${text(definition.id)}])`);
  const root = flow(definition.root);
  if (root) {
    edge({ id: start }, root.entry);
    root.exits.forEach((e) => edge(e, end));
  } else edge({ id: start }, end);
  out.push(`  ${end}([${text("end")}])`);
  return `${out.join("\n")}\n`;
}
