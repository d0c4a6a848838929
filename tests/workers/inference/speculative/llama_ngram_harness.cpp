// Drives llama.cpp's n-gram drafters (common/ngram-*.cpp, compiled as vendored) for one sequence as
// common/speculative.cpp's impls drive them, from a script on stdin; prints each draft on a line.
// test_against_llama_cpp.py runs the same script through the Python drafters.
//
//   map N M KEY_ONLY MIN_HITS | mod N_MATCH N_MAX N_MIN SIZE | cache STATIC|- DYNAMIC|-   (first line)
//   B LEN T...          begin with a prompt (map, mod)
//   D LAST LEN T...     draft after a history and the sampled token
//   A K                 K tokens of the last draft accepted (map, mod)
//   U PATH MIN MAX LEN T...   save the lookup cache of the tokens (llama-lookup-create's way)
#include "common.h"
#include "ngram-cache.h"
#include "ngram-map.h"
#include "ngram-mod.h"

#include <iostream>
#include <sstream>
#include <string>

static llama_tokens read_tokens(std::istringstream & in) {
    size_t len;
    in >> len;
    llama_tokens t(len);
    for (auto & x : t) {
        in >> x;
    }
    return t;
}

static void print(const llama_tokens & t) {
    for (size_t i = 0; i < t.size(); ++i) {
        printf(i ? " %d" : "%d", t[i]);
    }
    printf("\n");
}

// common_speculative_impl_ngram_mod's begin/draft_one/accept, one sequence, the table's size given
struct mod_impl {
    int n_max, n_min;
    common_ngram_mod mod;
    size_t i_last = 0, n_draft_last = 0;
    int n_low = 0;

    mod_impl(int n_match, int n_max, int n_min, size_t size) : n_max(n_max), n_min(n_min), mod(n_match, size) {}

    void begin(const llama_tokens & prompt) {
        i_last = 0;
        n_draft_last = 0;
        const size_t n = mod.get_n();
        if (prompt.size() < n) {
            return;
        }
        for (size_t i = 0; i < prompt.size() - n; ++i) {
            mod.add(prompt.data() + i);
        }
        i_last = prompt.size() - n;
        if ((double) mod.get_used() / (double) mod.size() > 0.25) {
            mod.reset();
        }
    }

    llama_tokens draft(const llama_tokens & prompt, llama_token id_last) {
        llama_tokens result;
        n_draft_last = 0;
        const size_t cur_len = prompt.size();
        if (cur_len < mod.get_n()) {
            return result;
        }
        const size_t n = mod.get_n();
        if (i_last + 32 < cur_len) {
            for (size_t i = i_last; i < cur_len - n; ++i) {
                mod.add(prompt.data() + i);
            }
            i_last = cur_len - n;
        }
        result.resize(n + n_max);
        for (size_t i = 0; i < n - 1; ++i) {
            result[i] = prompt.at(cur_len - n + 1 + i);
        }
        result[n - 1] = id_last;
        for (int i = 0; i < n_max; ++i) {
            const llama_token token = mod.get(result.data() + i);
            if (token == common_ngram_mod::EMPTY) {
                if (i < n_min) {
                    result.clear();
                    return result;
                }
                result.resize(n + i);
                break;
            }
            result[n + i] = token;
        }
        for (size_t i = 0; n + i < result.size(); ++i) {
            result[i] = result[n + i];
        }
        result.resize(result.size() - n);
        n_draft_last = result.size();
        return result;
    }

    void accept(uint16_t n_accepted) {
        if (n_draft_last > 0) {
            if ((double) n_accepted / (double) n_draft_last < 0.25) {
                n_low++;
                if (n_low >= 5) {
                    mod.reset();
                    n_low = 0;
                    i_last = 0;
                }
            } else {
                n_low = 0;
            }
        }
    }
};

// common_speculative_impl_ngram_cache::draft_one, one sequence (n_draft 8)
struct cache_impl {
    size_t cache_size = 0;
    common_ngram_cache context, dynamic, stat;

    llama_tokens draft(const llama_tokens & prompt, llama_token id_last) {
        if (cache_size < prompt.size() + 1) {
            llama_tokens tokens_new;
            for (size_t j = cache_size; j < prompt.size(); ++j) {
                tokens_new.push_back(prompt[j]);
            }
            tokens_new.push_back(id_last);
            common_ngram_cache_update(context, LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, tokens_new, tokens_new.size(), false);
            cache_size = prompt.size() + 1;
        }
        llama_tokens inp(prompt);
        inp.push_back(id_last);
        llama_tokens result = {id_last};
        common_ngram_cache_draft(inp, result, 8, LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, context, dynamic, stat);
        result.erase(result.begin());
        return result;
    }
};

int main() {
    std::string line, kind;
    std::getline(std::cin, line);
    std::istringstream head(line);
    head >> kind;
    if (kind == "map") {
        int n, m, key_only, min_hits;
        head >> n >> m >> key_only >> min_hits;
        common_ngram_map map(n, m, key_only != 0, min_hits);
        while (std::getline(std::cin, line)) {
            std::istringstream in(line);
            std::string op;
            in >> op;
            if (op == "B") {
                common_ngram_map_begin(map, read_tokens(in));
            } else if (op == "D") {
                llama_token last;
                in >> last;
                llama_tokens draft;
                common_ngram_map_draft(map, read_tokens(in), last, draft);
                print(draft);
            } else if (op == "A") {
                int k;
                in >> k;
                common_ngram_map_accept(map, (uint16_t) k);
            }
        }
    } else if (kind == "mod") {
        int n_match, n_max, n_min;
        size_t size;
        head >> n_match >> n_max >> n_min >> size;
        mod_impl impl(n_match, n_max, n_min, size);
        while (std::getline(std::cin, line)) {
            std::istringstream in(line);
            std::string op;
            in >> op;
            if (op == "B") {
                impl.begin(read_tokens(in));
            } else if (op == "D") {
                llama_token last;
                in >> last;
                print(impl.draft(read_tokens(in), last));
            } else if (op == "A") {
                int k;
                in >> k;
                impl.accept((uint16_t) k);
            }
        }
    } else if (kind == "cache") {
        std::string path_static, path_dynamic;
        head >> path_static >> path_dynamic;
        cache_impl impl;
        if (path_static != "-") {
            impl.stat = common_ngram_cache_load(path_static);
        }
        if (path_dynamic != "-") {
            impl.dynamic = common_ngram_cache_load(path_dynamic);
        }
        while (std::getline(std::cin, line)) {
            std::istringstream in(line);
            std::string op;
            in >> op;
            if (op == "D") {
                llama_token last;
                in >> last;
                print(impl.draft(read_tokens(in), last));
            } else if (op == "U") {
                std::string path;
                int ngram_min, ngram_max;
                in >> path >> ngram_min >> ngram_max;
                llama_tokens tokens = read_tokens(in);
                common_ngram_cache cache;
                common_ngram_cache_update(cache, ngram_min, ngram_max, tokens, tokens.size(), false);
                common_ngram_cache_save(cache, path);
            }
        }
    }
    return 0;
}
