/** Something the test infrastructure could not start; `code` says which, the message what to do. */
export class InfrastructureError extends Error {
  override readonly name = "InfrastructureError";
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}
