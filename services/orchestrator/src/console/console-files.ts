// The web console's built files, served beside the RPCs on the orchestrator's
// own port, so the page and the API share one origin (no CORS). Static files
// need no credential: they hold no data, and every RPC the page makes carries
// its bearer token. Unknown GET paths that are not RPCs get index.html, so a
// reload of `/jobs/ID` opens the app there.
import { createReadStream, existsSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { writeHead, type OidcConfig, type RequestHandler } from "@oz0/serving";

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".map": "application/json",
  ".txt": "text/plain; charset=utf-8",
};

/** How the console logs in with OIDC: what the page needs to run the authorization-code flow itself (no secret: it is a public client). */
export interface ConsoleOidcLogin {
  issuer: string;
  clientId: string;
  scopes: string[];
}

/** Where the page reads how it may log in (`{}`, or `{ oidc: ConsoleOidcLogin }`): public, like the page itself. */
export const CONSOLE_CONFIG_PATH = "/console-config.json";

/**
 * The page may load only its own scripts and styles and talk only to this
 * origin (and to the OIDC issuer it logs in with: discovery and the token
 * endpoint); nothing may frame it (the approve button must not be clickjacked).
 */
function securityHeaders(oidc: ConsoleOidcLogin | undefined): Record<string, string> {
  const connect = oidc ? `'self' ${new URL(oidc.issuer).origin}` : "'self'";
  return {
    "content-security-policy": `default-src 'self'; connect-src ${connect}; img-src 'self' data:; style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'`,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
  };
}

/** `/pkg.v1.Service/Method`: an RPC this server does not have, which must stay a 404, never the app. */
const RPC_PATH = /^\/[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+\/[A-Za-z_]\w*$/;

/** Where the console's build is: OZ0_CONSOLE_DIR, else the @oz0/console package's dist/. Undefined when neither exists. */
export function consoleDirectory(configured?: string): string | undefined {
  if (configured) return configured;
  try {
    const pkg = createRequire(import.meta.url).resolve("@oz0/console/package.json");
    const dist = path.join(path.dirname(pkg), "dist");
    return existsSync(path.join(dist, "index.html")) ? dist : undefined;
  } catch {
    return undefined;
  }
}

/** The OIDC log-in the console offers under this auth config: when it names an issuer and a client id for the console. */
export function consoleOidcLogin(oidc: OidcConfig | undefined): ConsoleOidcLogin | undefined {
  if (!oidc?.consoleClientId) return undefined;
  return { issuer: oidc.issuer, clientId: oidc.consoleClientId, scopes: oidc.consoleScopes ?? ["openid"] };
}

/**
 * The plain-HTTP handler for serve()'s `fallback`: the console's files (or a
 * page saying how to build them), and how the page may log in.
 */
export function consoleFiles(
  dir: string | undefined,
  options: { oidc?: ConsoleOidcLogin | undefined } = {},
): RequestHandler {
  const root = dir ? path.resolve(dir) : undefined;
  const security = securityHeaders(options.oidc);
  const config = JSON.stringify(options.oidc ? { oidc: options.oidc } : {});
  return (req, res) => {
    const url = new URL(req.url ?? "/", "http://console");
    const pathname = decodeURIComponent(url.pathname);
    if (req.method === "GET" && pathname === CONSOLE_CONFIG_PATH) {
      writeHead(res, 200, {
        "content-type": "application/json",
        "cache-control": "no-cache",
        ...security,
      });
      res.end(config);
      return;
    }
    if ((req.method !== "GET" && req.method !== "HEAD") || RPC_PATH.test(pathname)) {
      writeHead(res, 404, { "content-type": "text/plain; charset=utf-8", ...security });
      res.end(`${pathname} is neither an RPC of this orchestrator nor a page of its console\n`);
      return;
    }
    if (!root || !existsSync(path.join(root, "index.html"))) {
      writeHead(res, 503, {
        "content-type": "text/plain; charset=utf-8",
        "cache-control": "no-store",
        ...security,
      });
      res.end(
        "the web console is not built here: run `npm run build` in the repository (or set OZ0_CONSOLE_DIR to its dist folder)\n",
      );
      return;
    }
    const file = fileFor(root, pathname);
    if (!file && path.posix.extname(pathname) !== "") {
      // A missing script or image is a 404, not the app's HTML under a script's name.
      writeHead(res, 404, { "content-type": "text/plain; charset=utf-8", ...security });
      res.end(`${pathname} is not a file of the console\n`);
      return;
    }
    const isIndex = file === undefined;
    const target = file ?? path.join(root, "index.html");
    const headers: Record<string, string> = {
      "content-type": CONTENT_TYPES[path.extname(target)] ?? "application/octet-stream",
      // Files under assets/ are named by their content's hash: they never change. index.html names them, so it is always revalidated.
      "cache-control": !isIndex && pathname.startsWith("/assets/") ? "public, max-age=31536000, immutable" : "no-cache",
      ...security,
    };
    writeHead(res, 200, { ...headers, "content-length": String(statSync(target).size) });
    if (req.method === "HEAD") {
      res.end();
      return;
    }
    const stream = createReadStream(target);
    stream.on("error", () => res.destroy());
    stream.pipe(res as NodeJS.WritableStream);
  };
}

/** The file under `root` that `pathname` names, or undefined (the app's index.html answers). Never a path outside `root`. */
function fileFor(root: string, pathname: string): string | undefined {
  if (pathname === "/" || pathname.includes("\0")) return undefined;
  const candidate = path.resolve(root, `.${path.posix.normalize(pathname)}`);
  if (!candidate.startsWith(root + path.sep)) return undefined;
  try {
    return statSync(candidate).isFile() ? candidate : undefined;
  } catch {
    return undefined;
  }
}
