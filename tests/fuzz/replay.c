/*
 * replay.c — runs a libFuzzer target over every file of a corpus directory
 * without libFuzzer, so the corpus is replayed as an ordinary ctest test
 * (under the sanitizer build, a crash or leak fails the test).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
        uint8_t *data = NULL;
        size_t len = 0;
        if (fileio_read_all(path, 64u << 20, &data, &len) < 0) {
            fprintf(stderr, "cannot read \"%s\"\n", path);
            closedir(d);
            return 1;
        }
        LLVMFuzzerTestOneInput(data, len);
        free(data);
        n++;
    }
    closedir(d);
    if (n == 0) {
        fprintf(stderr, "corpus \"%s\" is empty\n", argv[1]);
        return 1;
    }
    printf("replayed %d inputs from %s\n", n, argv[1]);
    return 0;
}
