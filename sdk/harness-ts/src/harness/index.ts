// Filled in by the SDK work (issue 2).
export {};
