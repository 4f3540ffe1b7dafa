// millrace dashboard: keeps the page live and carries the bearer token.
//
// The token never travels in a URL the server sees: it comes from the URL's fragment
// (#token=...), which browsers do not send, or from the login form, and is kept in this
// tab's sessionStorage. Every refresh fetches the page again with the token in the
// Authorization header and swaps its <main> in.
(() => {
  "use strict";
  const KEY = "millrace.token";
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.has("token")) {
    sessionStorage.setItem(KEY, fragment.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }

  function headers() {
    const token = sessionStorage.getItem(KEY);
    return token ? { Authorization: "Bearer " + token } : {};
  }
  // The query page's script (query.js) sends its requests with the same header.
  window.millrace = Object.freeze({ headers });

  async function refresh() {
    const hadToken = sessionStorage.getItem(KEY) !== null;
    let response;
    try {
      response = await fetch(location.pathname + location.search, {
        headers: headers(),
        cache: "no-store",
      });
    } catch (error) {
      document.body.classList.add("offline");
      return;
    }
    document.body.classList.remove("offline");
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    const main = page.querySelector("main");
    if (main === null) {
      return;
    }
    if (response.status === 401 && hadToken) {
      sessionStorage.removeItem(KEY);
      main.querySelector(".refused")?.removeAttribute("hidden");
    }
    document.querySelector("main").replaceWith(main);
    document.title = page.title;
    wire();
    every(Number(page.body.dataset.refresh || 0));
  }

  let timer = null;
  function every(seconds) {
    if (timer === null && seconds > 0) {
      timer = setInterval(() => {
        if (document.querySelector("main[data-login]") === null) {
          refresh();
        }
      }, seconds * 1000);
    }
  }

  function wire() {
    // A page swapped in after the login form is wired by its script (query.js) too.
    document.dispatchEvent(new Event("millrace:main"));
    const form = document.querySelector("form#login");
    if (form !== null) {
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        sessionStorage.setItem(KEY, form.elements.token.value);
        refresh();
      });
    }
  }

  wire();
  if (document.querySelector("main[data-login]") !== null && sessionStorage.getItem(KEY)) {
    refresh();
  }
  every(Number(document.body.dataset.refresh || 0));
})();
