// The listener page's script (served at /listen/assets/listener.js): it speaks
// docs/protocol.md section 13 as a listener. A P-256 key pair made by WebCrypto for this
// page, the conversation key opened with it, packets opened with that key, and the text
// shown as it changes; updates reach screen readers through live regions.
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
