// Which lifecycle types a body of source sends, read by the TypeScript type
// checker rather than by pattern: every call whose parameter is a
// `LifecycleType` (or a union of some of its members) is a send, and the
// argument's type says which types it sends: a literal, a conditional, a
// template literal over a union, a lookup in an `as const` map. A parameter
// passed on to such a call (a sink forwarding what it was given) is not a
// send itself: its callers are. An argument whose type is the whole list (a
// variable typed `LifecycleType`) says nothing about what is sent, so it is
// reported rather than counted: the producer narrows its type instead.
// Calls into TypeScript's own library (`Map.get`, `Set.has`) are lookups,
// not sends.
import ts from "typescript";
import { LIFECYCLE_TYPES } from "@oz0/events-client";

export interface CallSite {
  file: string;
  line: number;
  text: string;
}

export interface LifecycleSends {
  /** Each type sent, with the call sites that send it. */
  sent: Map<string, CallSite[]>;
  /** Sends whose argument could be any type of the list. */
  unresolved: CallSite[];
}

const KNOWN: ReadonlySet<string> = new Set(LIFECYCLE_TYPES);

export function lifecycleSends(files: readonly string[]): LifecycleSends {
  const program = ts.createProgram(files, {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    skipLibCheck: true,
    noEmit: true,
    types: ["node"],
  });
  const checker = program.getTypeChecker();
  const sends: LifecycleSends = { sent: new Map(), unresolved: [] };
  const roots = new Set(files);
  for (const source of program.getSourceFiles()) {
    if (!roots.has(source.fileName)) continue;
    const visit = (node: ts.Node): void => {
      if (ts.isCallExpression(node) || ts.isNewExpression(node)) inspect(node, source);
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return sends;

  function inspect(call: ts.CallExpression | ts.NewExpression, source: ts.SourceFile): void {
    const signature = checker.getResolvedSignature(call);
    const declaration = signature?.getDeclaration();
    if (!signature || !declaration || program.isSourceFileDefaultLibrary(declaration.getSourceFile())) return;
    const parameters = signature.getParameters();
    (call.arguments ?? []).forEach((argument, index) => {
      const parameter = parameters[index];
      if (!parameter) return;
      const expected = literals(checker.getNonNullableType(checker.getTypeOfSymbol(parameter)));
      if (!expected || !expected.every((t) => KNOWN.has(t))) return;
      if (forwardsParameter(argument)) return;
      const site: CallSite = {
        file: source.fileName,
        line: source.getLineAndCharacterOfPosition(argument.getStart()).line + 1,
        text: argument.getText(),
      };
      const given = literals(checker.getTypeAtLocation(argument));
      if (!given || given.length === LIFECYCLE_TYPES.length) {
        sends.unresolved.push(site);
        return;
      }
      for (const type of given) sends.sent.set(type, [...(sends.sent.get(type) ?? []), site]);
    });
  }

  /** The string literals a type is a union of, or undefined when it is anything else. */
  function literals(type: ts.Type): string[] | undefined {
    const members = type.isUnion() ? type.types : [type];
    const out: string[] = [];
    for (const member of members) {
      if (!member.isStringLiteral()) return undefined;
      out.push(member.value);
    }
    return out;
  }

  function forwardsParameter(argument: ts.Expression): boolean {
    if (!ts.isIdentifier(argument)) return false;
    const symbol = checker.getSymbolAtLocation(argument);
    return (symbol?.declarations ?? []).some((d) => ts.isParameter(d));
  }
}
