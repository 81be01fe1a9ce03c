// Which real servers the selected test files need, so `run-tests.mjs
// lib/serving` starts nothing. A file needs Kafka when it says so with a
// `// needs: kafka` line or reads KAFKA_BROKERS; PostgreSQL likewise with
// `// needs: postgres` or DATABASE_URL.
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
    if (declared.includes("kafka") || text.includes("KAFKA_BROKERS")) needs.kafka = true;
    if (declared.includes("postgres") || declared.includes("postgresql") || text.includes("DATABASE_URL")) needs.postgres = true;
  }
  return needs;
}
