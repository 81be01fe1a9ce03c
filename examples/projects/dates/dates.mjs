// Small date helpers, with a bug the bundled example agent fixes.

/** `YYYY-MM-DD` in UTC. */
export function formatDate(date) {
  const year = date.getUTCFullYear();
  const month = String(date.getUTCMonth()).padStart(2, "0");
  const day = String(date.getUTCDate()).padStart(2, "0");
  return `${year}-${month}-${day}`;
}

/** The date `days` days after `date` (negative goes back). */
export function addDays(date, days) {
  return new Date(date.getTime() + days * 24 * 60 * 60 * 1000);
}
