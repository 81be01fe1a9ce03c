// `@oz0/harness/text`: how a harness's text is shown inert, for code that
// cannot load the host's Node modules (the console, in a browser). The same
// function, over the same list of characters, as `@oz0/harness/host` exports:
// the id rules' list (protocol/request-id-rules.ts), so what the CLI, the
// orchestrator's messages and the console escape never drift apart.
export { escapeRefusedCharacters } from "../protocol/request-id-rules.js";
