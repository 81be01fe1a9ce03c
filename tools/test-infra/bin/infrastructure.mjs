// Starts the real infrastructure the selected tests need and returns the
// environment that points tests at it. Filled in by the Kafka and PostgreSQL
// launchers; with nothing to start it returns an empty environment.
export async function startInfrastructure(_options) {
  return { env: {}, stop: async () => {} };
}
