// Which real servers the selected test files need, so `run-tests.mjs
// lib/serving` starts nothing. A file needs Kafka when it says so with a
// `// needs: kafka` line or reads `process.env.KAFKA_BROKERS`; PostgreSQL
// likewise with `// needs: postgres` or `process.env.DATABASE_URL`. (Merely
// naming the variable, as a manifest test does, is not a need.)
import { readFileSync } from "node:fs";

export interface TestNeeds {
  kafka: boolean;
  postgres: boolean;
}

export function testNeeds(files: string[]): TestNeeds {
  const needs: TestNeeds = { kafka: false, postgres: false };
  for (const file of files) {
    const text = readFileSync(file, "utf8");
    const declared = [...text.matchAll(/^\s*\/\/\s*needs:\s*(.+)$/gm)].flatMap((m) => m[1]!.split(/[\s,]+/));
    if (declared.includes("kafka") || readsEnv(text, "KAFKA_BROKERS")) needs.kafka = true;
    if (declared.includes("postgres") || declared.includes("postgresql") || readsEnv(text, "DATABASE_URL"))
      needs.postgres = true;
  }
  return needs;
}

function readsEnv(text: string, name: string): boolean {
  return (
    text.includes(`process.env.${name}`) ||
    text.includes(`process.env["${name}"]`) ||
    text.includes(`process.env['${name}']`)
  );
}
