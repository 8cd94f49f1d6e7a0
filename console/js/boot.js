// What a console page starts before its modules have loaded: the configuration (config.json) and the page's
// own module. Left to app.js, each would wait until app.js and every module it imports had arrived and run:
// a round trip later, on every first visit. A classic script, so it runs while those modules are still on
// their way; app.js takes the route and api.js the configuration's response from ``globalThis.flowledgerBoot``.
(() => {
  // A /console/... address -> its page module and the nav section it belongs to. Pages are plain links (no
  // client-side history): every page loads on its own, so a copied address always opens the same view.
  const ROUTES = [
    [/^\/console\/?$/, "flow_search", "flows"],
    [/^\/console\/flows\/?$/, "flow_search", "flows"],
    [/^\/console\/flows\/([^/]+)$/, "flow", "flows"],
    [/^\/console\/research\/?$/, "research", "research"],
    [/^\/console\/pathways\/?$/, "pathways", "pathways"],
    [/^\/console\/chat\/?$/, "chat", "chat"],
    [/^\/console\/patient\/?$/, "profile", "patient"],
    [/^\/console\/patient\/flows\/?$/, "patient", "patient/flows"],
    [/^\/console\/patient\/flows\/([^/]+)$/, "patient", "patient/flows"],
  ];
  const CONFIG_KEY = "flowledger.config"; // api.js keeps the configuration here, per tab, until ``until``

  function route(path) {
    for (const [pattern, module, section] of ROUTES) {
      const match = pattern.exec(path);
      if (match) return { module, section, id: match[1] ? decodeURIComponent(match[1]) : null };
    }
    return null;
  }

  function keptConfig() {
    try {
      return JSON.parse(sessionStorage.getItem(CONFIG_KEY))?.until > Date.now() / 1000;
    } catch {
      return false;
    }
  }

  let found = null;
  try {
    found = route(window.location.pathname);
  } catch {
    found = null; // an address that does not decode: app.js shows "Page not found"
  }
  if (found) {
    const preload = document.createElement("link");
    preload.rel = "modulepreload";
    preload.href = `/console/js/pages/${found.module}.js`;
    document.head.append(preload);
  }
  // The response, not its JSON: api.js checks it as it checks its own. null when it failed to arrive.
  const config = keptConfig() ? null : fetch("/console/config.json", { cache: "no-store" }).catch(() => null);
  globalThis.flowledgerBoot = { route: found, config };
})();
