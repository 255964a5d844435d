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
  const state = { socket: null, keyPair: null, publicKey: null, keys: new Map(), keyId: 0, joined: false, name: "", asked: false,
                  past: [], live: "", rereading: false, ended: false, backoff: 500, profile: null, profileAsks: new Set(),
                  joinCode: null };

  function status(text) { $("status").textContent = text; }
  function frame(type, payload) {
    if (!state.socket || state.socket.readyState !== WebSocket.OPEN) return null;
    const requestId = crypto.randomUUID();
    state.socket.send(JSON.stringify({ type, requestId, payload: Object.assign({ protocolVersion: 1, cryptoVersion: 1 }, payload) }));
    return requestId;
  }
  function send(type, payload) { frame(type, Object.assign({ conversationId }, payload)); }
  // The device's profile (docs/protocol.md, "Listener profiles"): its answers and refusals
  // are the profile section's, not the conversation's.
  function profileFrame(type, payload) { const id = frame(type, payload || {}); if (id) state.profileAsks.add(id); }

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

  function showProfile(profile) {
    state.profile = profile;
    $("profile").hidden = false;
    $("profileName").textContent = profile.name
      ? "You are " + profile.name + (profile.devices > 1 ? ", on " + profile.devices + " devices." : ".")
      : "You have no name yet.";
    if (profile.name && !$("name").value) $("name").value = profile.name;
  }
  function showConversations(list) {
    $("conversations").replaceChildren(...list.map((c) => {
      const item = document.createElement("li"), link = document.createElement("a");
      link.href = "/listen/" + encodeURIComponent(c.conversationId);
      link.textContent = c.name;
      item.append(link, (c.whispererName ? ", with " + c.whispererName : "") + (c.live ? " (live now)" : ""));
      return item;
    }));
    if (!list.length) { const item = document.createElement("li"); item.textContent = "None yet."; $("conversations").append(item); }
  }
  function onProfileFrame(frame) {
    const p = frame.payload || {};
    state.profileAsks.delete(frame.requestId);
    if (frame.type === "live_profile") { showProfile(p); profileFrame("live_profile_conversations_list"); }
    else if (frame.type === "live_profile_conversations") showConversations(p.conversations || []);
    else if (frame.type === "live_profile_code") {
      const link = location.origin + location.pathname + "#join=" + p.code;
      $("shareCode").textContent = p.code; $("shareLink").value = link; $("shared").hidden = false;
      $("profileStatus").textContent = "Open the link on your other device.";
    } else if (frame.type === "error") {
      $("profileStatus").textContent = p.code === "NOT_FOUND" ? "That code is wrong, used or expired." : "The server refused: " + p.message;
    }
  }

  async function onFrame(frame) {
    const p = frame.payload || {};
    if (frame.requestId && state.profileAsks.has(frame.requestId)) { onProfileFrame(frame); return; }
    if (frame.type === "live_profile" && !frame.requestId) { showProfile(p); return; }
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
        profileFrame("live_profile_conversations_list");
        break;
      case "live_deauthorized":
        state.ended = true; state.keys.clear();
        status(state.joined ? "The Whisperer has removed you from this conversation." : "The Whisperer did not let you in to this conversation.");
        profileFrame("live_profile_conversations_list");
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
    socket.onopen = () => {
      state.backoff = 500; state.joined = false;
      if (state.joinCode) { profileFrame("live_profile_join", { code: state.joinCode }); state.joinCode = null; }
      else profileFrame("live_profile_get");
      if (state.asked) { status("Waiting for the Whisperer…"); send("live_listen_offer", { publicKey: b64(state.publicKey) }); }
    };
    socket.onmessage = (event) => { try { onFrame(JSON.parse(event.data)); } catch (e) {} };
    socket.onclose = () => {
      if (state.ended) return;
      status("Connection lost; trying again…");
      setTimeout(connect, state.backoff);
      state.backoff = Math.min(state.backoff * 2, 30000);
    };
  }

  function start(event) {
    event.preventDefault();
    state.name = $("name").value.trim().slice(0, 64);
    if (!state.name) { $("name").focus(); return; }
    $("join").hidden = true;
    // The name is the profile's, kept for this device's next visits and its other devices.
    if (!state.profile || state.profile.name !== state.name) profileFrame("live_profile_rename", { name: state.name });
    state.asked = true;
    status("Waiting for the Whisperer…");
    send("live_listen_offer", { publicKey: b64(state.publicKey) });
  }
  function rename(event) {
    event.preventDefault();
    const name = $("newName").value.trim().slice(0, 64);
    if (name) { profileFrame("live_profile_rename", { name }); $("newName").value = ""; }
  }

  document.addEventListener("DOMContentLoaded", async () => {
    if (!window.crypto || !crypto.subtle || !/^[0-9a-f-]{36}$/.test(conversationId)) { status("This browser cannot open this link (it needs WebCrypto over HTTPS)."); return; }
    const code = /^#join=([23456789A-HJKMNP-Z]{8})$/i.exec(location.hash);
    if (code) { state.joinCode = code[1].toUpperCase(); history.replaceState(null, "", location.pathname); }
    $("announceLive").addEventListener("change", (e) => $("live").setAttribute("aria-live", e.target.checked ? "polite" : "off"));
    $("join").addEventListener("submit", start);
    $("rename").addEventListener("submit", rename);
    $("share").addEventListener("click", () => profileFrame("live_profile_share"));
    $("copy").addEventListener("click", () => { navigator.clipboard.writeText($("shareLink").value).then(() => { $("profileStatus").textContent = "Link copied."; }, () => { $("shareLink").select(); }); });
    state.keyPair = await crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, false, ["deriveBits"]);
    state.publicKey = new Uint8Array(await crypto.subtle.exportKey("raw", state.keyPair.publicKey));
    connect();
    $("join").hidden = false;
    status("Type your name and ask to join.");
    $("name").focus();
  });
})();
