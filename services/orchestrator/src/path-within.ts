// Whether one path lies inside another, by their names as given (resolve
// links first where they matter). A folder named `..x` is inside; `..` and
// `../x` are not.
import path from "node:path";

export function isWithin(inner: string, outer: string): boolean {
  const relative = path.relative(outer, inner);
  return relative === "" || (relative !== ".." && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative));
}
