#include "tokenizer/unicode.h"

#include <array>

namespace mvllm {

bool utf8_next(std::string_view s, size_t& pos, uint32_t& cp) {
    const size_t n = s.size();
    if (pos >= n) return false;
    const auto b0 = static_cast<uint8_t>(s[pos]);
    if (b0 < 0x80) {
        cp = b0;
        pos += 1;
        return true;
    }
    int len;
    uint32_t min;
    if ((b0 & 0xE0) == 0xC0) {
        len = 2, cp = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
        len = 3, cp = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
        len = 4, cp = b0 & 0x07, min = 0x10000;
    } else {
        return false;
    }
    if (pos + len > n) return false;
    for (int i = 1; i < len; ++i) {
        const auto b = static_cast<uint8_t>(s[pos + i]);
        if ((b & 0xC0) != 0x80) return false;
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    pos += len;
    return true;
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

bool utf8_is_valid(std::string_view s) {
    size_t pos = 0;
    uint32_t cp;
    while (pos < s.size()) {
        if (static_cast<uint8_t>(s[pos]) < 0x80) {
            ++pos;
            continue;
        }
        if (!utf8_next(s, pos, cp)) return false;
    }
    return true;
}

std::string utf8_sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    uint32_t cp;
    while (pos < s.size()) {
        const size_t start = pos;
        if (utf8_next(s, pos, cp)) {
            out.append(s.substr(start, pos - start));
        } else {
            utf8_append(out, 0xFFFD);
            pos = start + 1;
        }
    }
    return out;
}

size_t utf8_complete_prefix(std::string_view s) {
    // Look back at most 3 bytes for the lead byte of an unfinished sequence.
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto b = static_cast<uint8_t>(s[n - back]);
        if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking
        int len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
        if (static_cast<size_t>(len) <= back) return n;  // complete (or invalid: let it through)
        // Would the bytes so far start a valid sequence? Check by completing with 0x80s.
        std::string probe(s.substr(n - back));
        probe.append(len - back, static_cast<char>(0x80));
        size_t pos = 0;
        uint32_t cp;
        // A prefix that can never become valid is not held back.
        bool can_complete = utf8_next(probe, pos, cp);
        if (!can_complete) {
            // E0 A0..BF, F0 90..BF, ...: completing with 0x80 may be overlong only for the minimum;
            // try 0xBF as well.
            probe.replace(back, len - back, len - back, static_cast<char>(0xBF));
            pos = 0;
            can_complete = utf8_next(probe, pos, cp);
        }
        return can_complete ? n - back : n;
    }
    return n;
}

namespace {

struct ByteLevelTables {
    std::array<std::string, 256> byte_to_text;
    std::array<int16_t, 512> cp_to_byte;  // the alphabet lies below U+0200
    ByteLevelTables() {
        cp_to_byte.fill(-1);
        auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
        int next = 0;
        for (int b = 0; b < 256; ++b) {
            const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : 0x100 + next++;
            utf8_append(byte_to_text[b], cp);
            cp_to_byte[cp] = static_cast<int16_t>(b);
        }
    }
};

const ByteLevelTables& tables() {
    static const ByteLevelTables t;
    return t;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t byte) { return tables().byte_to_text[byte]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? tables().cp_to_byte[cp] : -1; }

std::string bytes_to_byte_level(std::string_view bytes) {
    const auto& t = tables();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) out += t.byte_to_text[static_cast<uint8_t>(c)];
    return out;
}

std::string byte_level_to_bytes(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    uint32_t cp;
    while (pos < text.size()) {
        const size_t start = pos;
        if (!utf8_next(text, pos, cp)) {
            out += text[start];
            pos = start + 1;
            continue;
        }
        const int b = unicode_to_byte(cp);
        if (b >= 0) {
            out += static_cast<char>(b);
        } else {
            out.append(text.substr(start, pos - start));
        }
    }
    return out;
}

}  // namespace mvllm
