/// The listener page's HTML, style and script (`ListenPage`). The script speaks
/// docs/protocol.md section 13 as a listener: a P-256 key pair made by WebCrypto for
/// this page, the conversation key opened with it, packets opened with that key, and
/// the text shown as it changes; updates reach screen readers through live regions.
enum ListenAssets {
    static let page = #"""
    <!doctype html>
    <html lang="en">
    <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <title>Listen · Whisper</title>
    <link rel="stylesheet" href="/listen/assets/listener.css">
    <script src="/listen/assets/listener.js" defer></script>
    </head>
    <body>
    <main>
    <h1 id="title">Listen</h1>
    <p id="status" role="status" aria-live="polite">Loading…</p>
    <form id="join" hidden>
    <label for="name">Your name, as the Whisperer will see it</label>
    <input id="name" name="name" autocomplete="nickname" maxlength="64" required>
    <button id="ask" type="submit">Ask to join</button>
    </form>
    <section id="conversation" hidden aria-labelledby="pastHeading">
    <h2 id="pastHeading">Said</h2>
    <div id="past" role="log" aria-live="polite" aria-relevant="additions"></div>
    <h2 id="liveHeading">Being typed</h2>
    <p id="live" aria-labelledby="liveHeading" aria-live="off"></p>
    <label class="option"><input id="announceLive" type="checkbox"> Read out the text as it is typed</label>
    </section>
    </main>
    </body>
    </html>
    """#

    static let style = #"""
    :root { color-scheme: light dark; --fg: #111; --bg: #fff; --muted: #555; --accent: #0b57d0; }
    @media (prefers-color-scheme: dark) { :root { --fg: #eee; --bg: #121212; --muted: #aaa; --accent: #8ab4f8; } }
    * { box-sizing: border-box; }
    [hidden] { display: none !important; }
    body { margin: 0; font: 1.25rem/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
    main { max-width: 48rem; margin: 0 auto; padding: 1rem; }
    h1 { font-size: 1.5rem; margin: 0 0 .5rem; overflow-wrap: anywhere; }
    h2 { font-size: 1rem; color: var(--muted); margin: 1.5rem 0 .25rem; }
    #status { color: var(--muted); }
    form { display: flex; flex-direction: column; gap: .5rem; }
    input[type=text], input:not([type]) , #name { font: inherit; padding: .6rem; border: 2px solid var(--muted); border-radius: .4rem; background: transparent; color: inherit; }
    button { font: inherit; padding: .6rem 1rem; border: 0; border-radius: .4rem; background: var(--accent); color: var(--bg); min-height: 3rem; }
    button:focus-visible, input:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
    #past p { margin: .25rem 0; overflow-wrap: anywhere; }
    #live { min-height: 2.5rem; font-size: 1.6rem; font-weight: 600; overflow-wrap: anywhere; white-space: pre-wrap; margin: 0; }
    .option { display: block; margin-top: 1.5rem; font-size: 1rem; }
    """#

    static let script = #"""
    "use strict";
    (() => {
      const conversationId = decodeURIComponent(location.pathname.split("/").filter(Boolean)[1] || "");
      const $ = (id) => document.getElementById(id);
      const enc = new TextEncoder(), dec = new TextDecoder();
      const b64 = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)));
      const unb64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
      const cat = (...parts) => { const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0)); let i = 0; for (const p of parts) { out.set(p, i); i += p.length; } return out; };
      const state = { socket: null, keyPair: null, publicKey: null, keys: new Map(), keyId: 0, joined: false, name: "",
                      past: [], live: "", rereading: false, ended: false, backoff: 500 };

      function status(text) { $("status").textContent = text; }
      function send(type, payload) {
        if (state.socket && state.socket.readyState === WebSocket.OPEN) {
          state.socket.send(JSON.stringify({ type, requestId: crypto.randomUUID(), payload: Object.assign({ protocolVersion: 1, cryptoVersion: 1, conversationId }, payload) }));
        }
      }

      // The conversation key, sealed to this page's key pair (docs/protocol.md, "Keys").
      async function openSealedKey(keyId, sealed) {
        const bytes = unb64(sealed);
        const ephemeral = bytes.slice(0, 65), nonce = bytes.slice(65, 77), box = bytes.slice(77);
        const peer = await crypto.subtle.importKey("raw", ephemeral, { name: "ECDH", namedCurve: "P-256" }, false, []);
        const shared = await crypto.subtle.deriveBits({ name: "ECDH", public: peer }, state.keyPair.privateKey, 256);
        const hkdf = await crypto.subtle.importKey("raw", shared, "HKDF", false, ["deriveKey"]);
        const wrapping = await crypto.subtle.deriveKey(
          { name: "HKDF", hash: "SHA-256", salt: cat(ephemeral, state.publicKey), info: enc.encode("whisper live key v1") },
          hkdf, { name: "AES-GCM", length: 256 }, false, ["decrypt"]);
        const raw = await crypto.subtle.decrypt({ name: "AES-GCM", iv: nonce, additionalData: enc.encode(conversationId + "|" + keyId) }, wrapping, box);
        return crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]);
      }
      function packetData(keyId, direction) { return enc.encode(conversationId + "|" + keyId + "|" + direction); }
      async function openPacket(keyId, packet) {
        const key = state.keys.get(keyId);
        if (!key) return null;
        const bytes = unb64(packet);
        const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv: bytes.slice(0, 12), additionalData: packetData(keyId, "w") }, key, bytes.slice(12));
        return dec.decode(plain);
      }
      async function sendPacket(text) {
        const key = state.keys.get(state.keyId);
        if (!key) return;
        const nonce = crypto.getRandomValues(new Uint8Array(12));
        const box = await crypto.subtle.encrypt({ name: "AES-GCM", iv: nonce, additionalData: packetData(state.keyId, "l") }, key, enc.encode(text));
        send("live_listener_packet", { keyId: state.keyId, packet: b64(cat(nonce, new Uint8Array(box))) });
      }

      // Packets: "offset|data"; offsets count Unicode code points.
      function render() {
        $("live").textContent = state.live;
      }
      function addPast(line) {
        const p = document.createElement("p");
        p.textContent = line;
        $("past").appendChild(p);
        while ($("past").children.length > 500) $("past").firstChild.remove();
      }
      function apply(text) {
        const bar = text.indexOf("|");
        if (bar < 1) return;
        const offset = Number(text.slice(0, bar)), data = text.slice(bar + 1);
        if (!Number.isInteger(offset)) return;
        if (offset >= 0) {
          if (state.rereading) return;
          const chars = Array.from(state.live);
          if (offset > chars.length) { state.rereading = true; sendPacket("-5|"); return; }
          state.live = chars.slice(0, offset).join("") + data;
        } else if (offset === -1) {
          addPast(state.live); state.live = "";
        } else if (offset === -2) {
          $("past").replaceChildren(); for (const line of data.split("\n")) if (line) addPast(line);
        } else if (offset === -3) {
          state.live = data; state.rereading = false;
        } else if (offset === -4) {
          $("past").replaceChildren(); state.live = "";
        }
        render();
      }

      async function onFrame(frame) {
        const p = frame.payload || {};
        switch (frame.type) {
          case "live_offered":
            $("title").textContent = p.conversationName;
            // A Whisperer who just arrived: announce this page again, so it learns the key.
            if (p.broadcast) { if (!state.joined) send("live_listen_offer", { publicKey: b64(state.publicKey) }); break; }
            status("Asking " + p.whispererName + " to let you in…");
            send("live_listen_request", { name: state.name });
            break;
          case "live_authorized":
            state.keys.set(p.keyId, await openSealedKey(p.keyId, p.sealedKey));
            state.keyId = Math.max(state.keyId, p.keyId);
            if (!state.joined) { state.joined = true; send("live_joining", {}); }
            $("conversation").hidden = false;
            status("Listening.");
            break;
          case "live_deauthorized":
            state.ended = true; state.keys.clear();
            status(state.joined ? "The Whisperer has removed you from this conversation." : "The Whisperer did not let you in to this conversation.");
            state.socket.close();
            break;
          case "live_content":
            try { const text = await openPacket(p.keyId, p.packet); if (text !== null) apply(text); } catch (e) { state.rereading = true; sendPacket("-5|"); }
            break;
          case "live_dropped":
            if (p.reason === "deleted") { state.ended = true; state.keys.clear(); status("This conversation was deleted."); state.socket.close(); }
            else if (!p.listenerId) { state.joined = false; status("The Whisperer has left. Waiting for them to come back…"); }
            break;
          case "reconnect":
            state.socket.close();
            break;
          case "error":
            if (p.code === "NOT_FOUND") { state.ended = true; status("This conversation does not exist (any more)."); state.socket.close(); }
            else if (p.code === "FORBIDDEN" || p.code === "RATE_LIMITED") status("The server refused: " + p.message);
            break;
        }
      }

      function connect() {
        const scheme = location.protocol === "https:" ? "wss://" : "ws://";
        const socket = new WebSocket(scheme + location.host + "/ws");
        state.socket = socket;
        socket.onopen = () => { state.backoff = 500; state.joined = false; status("Waiting for the Whisperer…"); send("live_listen_offer", { publicKey: b64(state.publicKey) }); };
        socket.onmessage = (event) => { try { onFrame(JSON.parse(event.data)); } catch (e) {} };
        socket.onclose = () => {
          if (state.ended) return;
          status("Connection lost; trying again…");
          setTimeout(connect, state.backoff);
          state.backoff = Math.min(state.backoff * 2, 30000);
        };
      }

      async function start(event) {
        event.preventDefault();
        state.name = $("name").value.trim().slice(0, 64);
        if (!state.name) { $("name").focus(); return; }
        $("join").hidden = true;
        state.keyPair = await crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, false, ["deriveBits"]);
        state.publicKey = new Uint8Array(await crypto.subtle.exportKey("raw", state.keyPair.publicKey));
        connect();
      }

      document.addEventListener("DOMContentLoaded", () => {
        if (!window.crypto || !crypto.subtle || !/^[0-9a-f-]{36}$/.test(conversationId)) { status("This browser cannot open this link (it needs WebCrypto over HTTPS)."); return; }
        $("announceLive").addEventListener("change", (e) => $("live").setAttribute("aria-live", e.target.checked ? "polite" : "off"));
        $("join").addEventListener("submit", start);
        $("join").hidden = false;
        status("Type your name and ask to join.");
        $("name").focus();
      });
    })();
    """#
}
