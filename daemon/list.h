/* list.h: intrusive doubly linked lists, as systemd's list.h has them.
 *
 * An item links through two pointer fields the caller names (prev and next,
 * e.g. cprev and cnext for its place in a connection's list), so that one
 * item can be on several lists.  A list is its head pointer, and a tail
 * pointer too for the lists items are appended to.  The arguments are
 * evaluated more than once: pass plain lvalues. */
#ifndef GPUIPCD_LIST_H
#define GPUIPCD_LIST_H

#include <stddef.h>

/* item becomes the first of the list at head. */
#define LIST_PREPEND(head, item, prev, next)                    \
        do {                                                    \
                (item)->prev = NULL;                            \
                (item)->next = (head);                          \
                if (head)                                       \
                        (head)->prev = (item);                  \
                (head) = (item);                                \
        } while (0)

/* item becomes the last of the list at head and tail. */
#define LIST_APPEND(head, tail, item, prev, next)               \
        do {                                                    \
                (item)->next = NULL;                            \
                (item)->prev = (tail);                          \
                if (tail)                                       \
                        (tail)->next = (item);                  \
                else                                            \
                        (head) = (item);                        \
                (tail) = (item);                                \
        } while (0)

/* Takes item out of the list at head; its own fields are left as they were. */
#define LIST_REMOVE(head, item, prev, next)                     \
        do {                                                    \
                if ((item)->prev)                               \
                        (item)->prev->next = (item)->next;      \
                else                                            \
                        (head) = (item)->next;                  \
                if ((item)->next)                               \
                        (item)->next->prev = (item)->prev;      \
        } while (0)

/* The same for a list with a tail. */
#define LIST_REMOVE_TAIL(head, tail, item, prev, next)          \
        do {                                                    \
                if (!(item)->next)                              \
                        (tail) = (item)->prev;                  \
                LIST_REMOVE(head, item, prev, next);            \
        } while (0)

#endif
