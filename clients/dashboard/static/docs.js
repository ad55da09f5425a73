// The /docs page: the API from /openapi.json, with "Try it out". No build step, no CDN.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const KEY = "toolrelay.token";
  $("token").value = sessionStorage.getItem(KEY) || "";
  $("token").addEventListener("change", () => sessionStorage.setItem(KEY, $("token").value.trim()));
  function el(tag, attrs = {}, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null) continue;
      if (k === "text") n.textContent = v;
      else if (k === "class") n.className = v;
      else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
      else n.setAttribute(k, v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) n.append(kid);
    return n;
  }
  let spec = null;
  function resolve(schema, depth = 0) {
    if (!schema || depth > 6) return schema;
    if (schema.$ref) {
      const name = schema.$ref.split("/").pop();
      return resolve((spec.components.schemas || {})[name], depth + 1);
    }
    const out = Array.isArray(schema) ? [] : {};
    for (const [k, v] of Object.entries(schema)) {
      out[k] = v && typeof v === "object" ? resolve(v, depth + 1) : v;
    }
    return out;
  }
  function example(schema, depth = 0) {
    schema = resolve(schema);
    if (!schema || depth > 4) return null;
    if (schema.example !== undefined) return schema.example;
    if (schema.default !== undefined) return schema.default;
    if (schema.anyOf) return example(schema.anyOf[0], depth + 1);
    switch (schema.type) {
      case "object": {
        const o = {};
        for (const k of schema.required || []) o[k] = example(schema.properties[k], depth + 1);
        return o;
      }
      case "array": return [];
      case "string": return "";
      case "integer": case "number": return 0;
      case "boolean": return false;
      default: return null;
    }
  }
  function operation(path, method, op) {
    const params = (op.parameters || []).filter((p) => p.in === "path" || p.in === "query");
    const inputs = params.map((p) => {
      const input = el("input", { type: "text", "aria-label": p.name, "data-in": p.in,
        "data-name": p.name, placeholder: p.required ? "required" : "optional" });
      return el("div", { class: "param" }, el("label", { text: `${p.name} (${p.in})` }), input);
    });
    const bodySchema = op.requestBody && op.requestBody.content
      && op.requestBody.content["application/json"] && op.requestBody.content["application/json"].schema;
    const body = bodySchema ? el("textarea", { rows: "6", "aria-label": "Request body (JSON)" }) : null;
    if (body) body.value = JSON.stringify(example(bodySchema), null, 2);
    const result = el("div", { role: "status" });
    const secured = !(Array.isArray(op.security) && op.security.length === 0);
    async function send() {
      let url = path;
      const query = new URLSearchParams();
      for (const input of inputs.map((d) => d.querySelector("input"))) {
        const value = input.value.trim();
        if (input.dataset.in === "path") url = url.replace(`{${input.dataset.name}}`, encodeURIComponent(value));
        else if (value) query.set(input.dataset.name, value);
      }
      if ([...query].length) url += `?${query}`;
      const headers = {};
      const token = $("token").value.trim();
      if (secured && token) headers.Authorization = `Bearer ${token}`;
      if (body) headers["Content-Type"] = "application/json";
      result.replaceChildren(el("p", { text: `${method.toUpperCase()} ${url} …` }));
      try {
        const response = await fetch(url, { method: method.toUpperCase(), headers,
          body: body ? body.value : undefined, cache: "no-store" });
        let text = await response.text();
        try { text = JSON.stringify(JSON.parse(text), null, 2); } catch { /* not JSON */ }
        result.replaceChildren(
          el("p", { class: "status", text: `${response.status} ${response.statusText}` }),
          el("pre", { text: text || "(empty body)" }));
      } catch (err) {
        result.replaceChildren(el("p", { class: "status", text: `request failed: ${err}` }));
      }
    }
    const responses = Object.entries(op.responses || {}).map(([code, r]) => `${code}: ${r.description || ""}`);
    return el("details", { class: "op", id: op.operationId || `${method}-${path}` },
      el("summary", {},
        el("span", { class: `method ${method}`, text: method }),
        el("span", { class: "path", text: path }),
        el("span", { class: "summary", text: op.summary || "" }),
        secured ? el("span", { class: "lock", text: "bearer token" }) : el("span", { class: "lock", text: "public" })),
      op.description ? el("p", { text: op.description }) : null,
      bodySchema ? el("h3", { text: "Request body" }) : null,
      bodySchema ? el("pre", { text: JSON.stringify(resolve(bodySchema), null, 2) }) : null,
      el("h3", { text: "Responses" }),
      el("pre", { text: responses.join("\n") }),
      el("h3", { text: "Try it out" }),
      ...inputs, body,
      el("p", {}, el("button", { type: "button", class: "try", onclick: send, text: "Send" })),
      result);
  }
  fetch("/openapi.json").then((r) => r.json()).then((loaded) => {
    spec = loaded;
    document.title = `${spec.info.title} API ${spec.info.version}`;
    $("title").textContent = document.title;
    const ops = [];
    for (const [path, methods] of Object.entries(spec.paths)) {
      for (const [method, op] of Object.entries(methods)) ops.push(operation(path, method, op));
    }
    $("ops").replaceChildren(
      el("p", { text: spec.info.description || "" }), ...ops);
  }).catch((err) => { $("ops").textContent = `Could not load /openapi.json: ${err}`; });
})();
