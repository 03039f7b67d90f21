// UTF-8 helpers and the GPT-2 byte-level alphabet.
//
// Byte-level BPE vocabularies (GPT-2, Llama 3, Qwen2) store tokens as text over a 256-character
// alphabet: each byte value maps to one printable code point (printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in order), so a token such as "Ġhello" is the bytes
// " hello".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mvllm {

// Decodes one code point at s[pos]; advances pos. Returns false (pos unchanged) on an invalid or
// truncated sequence (overlongs, surrogates and values above U+10FFFF are invalid).
bool utf8_next(std::string_view s, size_t& pos, uint32_t& cp);
void utf8_append(std::string& out, uint32_t cp);
bool utf8_is_valid(std::string_view s);
// Invalid bytes become U+FFFD.
std::string utf8_sanitize(std::string_view s);
// Length of the longest prefix of s that does not end inside an incomplete (but so far valid)
// multi-byte sequence: s.substr(n) is empty or the start of a character still to come.
size_t utf8_complete_prefix(std::string_view s);

// Byte-level alphabet: byte -> its character (UTF-8), and code point -> byte (-1 if none).
const std::string& byte_to_unicode(uint8_t byte);
int unicode_to_byte(uint32_t cp);
// "hello world" -> "helloĠworld".
std::string bytes_to_byte_level(std::string_view bytes);
// The inverse; code points outside the alphabet are copied through as UTF-8.
std::string byte_level_to_bytes(std::string_view text);

}  // namespace mvllm
